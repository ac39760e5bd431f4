#include "prometheus.h"

#include <cstdio>

namespace kvx::serve {
namespace {

class Writer {
public:
    void metric(const char* name, const char* type, const char* help) {
        out_ += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    }
    // A metric of one value, without labels.
    void single(const char* name, const char* type, const char* help, double v) {
        metric(name, type, help);
        value(name, v);
    }
    void value(const std::string& name_and_labels, double v) {
        char number[64];
        std::snprintf(number, sizeof number, "%.17g", v);
        out_ += name_and_labels + " " + number + "\n";
    }
    void histogram(const char* name, const char* help, const Histogram& h) {
        metric(name, "histogram", help);
        for (size_t i = 0; i < h.bounds.size(); ++i) {
            char bound[32];
            std::snprintf(bound, sizeof bound, "%g", h.bounds[i]);
            value(std::string(name) + "_bucket{le=\"" + bound + "\"}", static_cast<double>(h.counts[i]));
        }
        value(std::string(name) + "_bucket{le=\"+Inf\"}", static_cast<double>(h.counts.back()));
        value(std::string(name) + "_sum", h.sum);
        value(std::string(name) + "_count", static_cast<double>(h.count));
    }
    std::string take() { return std::move(out_); }

private:
    std::string out_;
};

}  // namespace

std::string prometheus_text(const ServingMetrics& m) {
    Writer w;
    w.single("kvx_requests_running", "gauge", "Requests admitted to the running batch.", m.requests_running);
    w.single("kvx_requests_waiting", "gauge", "Requests queued for admission.", m.requests_waiting);
    w.metric("kvx_requests_total", "counter", "Requests ended, by how.");
    w.value("kvx_requests_total{status=\"finished\"}", static_cast<double>(m.requests_finished));
    w.value("kvx_requests_total{status=\"aborted\"}", static_cast<double>(m.requests_aborted));
    w.value("kvx_requests_total{status=\"rejected\"}", static_cast<double>(m.requests_rejected));
    w.single("kvx_preemptions_total", "counter", "Sequences freed to make room in the KV pool, recomputed later.",
             static_cast<double>(m.preemptions));

    w.metric("kvx_kv_blocks", "gauge", "KV cache blocks by state, per layer group (in use includes shared).");
    for (size_t g = 0; g < m.kv.size(); ++g) {
        const KvCacheUsage& u = m.kv[g];
        const std::string group = "group=\"" + std::to_string(g) + "\"";
        w.value("kvx_kv_blocks{" + group + ",state=\"total\"}", u.blocks_total);
        w.value("kvx_kv_blocks{" + group + ",state=\"in_use\"}", u.blocks_in_use);
        w.value("kvx_kv_blocks{" + group + ",state=\"shared\"}", u.blocks_shared);
        w.value("kvx_kv_blocks{" + group + ",state=\"cached\"}", u.blocks_cached);
        w.value("kvx_kv_blocks{" + group + ",state=\"free\"}", u.blocks_free);
    }
    w.metric("kvx_kv_block_bytes", "gauge", "Bytes of one KV block (K and V of every layer of its group).");
    for (size_t g = 0; g < m.kv.size(); ++g)
        w.value("kvx_kv_block_bytes{group=\"" + std::to_string(g) + "\"}",
                static_cast<double>(m.kv[g].bytes_per_block));

    w.single("kvx_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.",
             static_cast<double>(m.prompt_tokens));
    w.single("kvx_prompt_tokens_cached_total", "counter", "Prompt tokens taken from cached KV blocks, not computed.",
             static_cast<double>(m.cached_prompt_tokens));
    w.single("kvx_prefill_tokens_total", "counter", "Rows computed for prompts (and recomputation after preemption).",
             static_cast<double>(m.prefill_tokens));
    w.single("kvx_decode_tokens_total", "counter", "Rows computed for sampled tokens.",
             static_cast<double>(m.decode_tokens));
    w.single("kvx_prefill_tokens_per_second", "gauge", "Prefill rows per second over the last 10 seconds.",
             m.prefill_tokens_per_second);
    w.single("kvx_decode_tokens_per_second", "gauge", "Decode rows per second over the last 10 seconds.",
             m.decode_tokens_per_second);
    w.single("kvx_steps_total", "counter", "Forward passes.", static_cast<double>(m.steps));
    w.single("kvx_batched_steps_total", "counter", "Forward passes holding rows of two or more sequences.",
             static_cast<double>(m.batched_steps));
    w.single("kvx_cache_check_failures_total", "counter", "Failed KV cache invariant checks (kvx serve --check-cache).",
             static_cast<double>(m.cache_check_failures));

    w.histogram("kvx_time_to_first_token_seconds", "From a request's arrival to its first token.",
                m.time_to_first_token);
    w.histogram("kvx_time_per_output_token_seconds", "Between a choice's consecutive tokens.", m.time_per_output_token);
    return w.take();
}

}  // namespace kvx::serve
