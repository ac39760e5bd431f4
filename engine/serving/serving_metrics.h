// What a server reports about itself (GET /metrics): the queue, the KV pool, throughput and latency. The
// scheduler keeps one and hands out copies; tools/kvx/serve/ writes them as Prometheus text.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "engine/cache/kv_cache_usage.h"

namespace kvx {

// Cumulative buckets as Prometheus keeps them: counts[i] observations <= bounds[i], the last one +Inf.
struct Histogram {
    std::vector<double> bounds;   // seconds, ascending
    std::vector<uint64_t> counts; // [bounds.size() + 1]
    double sum = 0;
    uint64_t count = 0;

    explicit Histogram(std::vector<double> upper_bounds);
    void observe(double value);
};

struct ServingMetrics {
    int32_t requests_running = 0;  // admitted, with at least one choice in the cache or about to fork
    int32_t requests_waiting = 0;  // queued, or every choice preempted
    std::vector<KvCacheUsage> kv;  // [layer groups] (Engine::cache_usage_by_group)
    uint64_t requests_finished = 0;
    uint64_t requests_aborted = 0;   // cancelled by their client or by shutdown
    uint64_t requests_rejected = 0;  // refused because the queue was full
    uint64_t preemptions = 0;        // sequences freed to make room, recomputed later
    uint64_t prompt_tokens = 0;      // prompt tokens of admitted requests
    uint64_t cached_prompt_tokens = 0;  // of those, taken from cached blocks
    uint64_t prefill_tokens = 0;     // rows computed for prompts (and recomputation after preemption)
    uint64_t decode_tokens = 0;      // rows computed for sampled tokens
    uint64_t steps = 0;              // forward passes
    uint64_t batched_steps = 0;      // of those, passes holding rows of two or more sequences
    uint64_t cache_check_failures = 0;  // failed invariant checks (only with checks on)
    double prefill_tokens_per_second = 0;  // over the last rate window
    double decode_tokens_per_second = 0;
    Histogram time_to_first_token{{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}};
    Histogram time_per_output_token{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}};
};

// Tokens per second over a sliding window of steps.
class TokenRate {
public:
    explicit TokenRate(double window_seconds) : window_(window_seconds) {}
    void add(double now, uint64_t prefill, uint64_t decode);
    // (prefill, decode) tokens per second over the window ending at `now`.
    void rates(double now, double& prefill, double& decode);

private:
    struct Step {
        double time;
        uint64_t prefill, decode;
    };
    void drop_before(double time);
    double window_;
    std::deque<Step> steps_;
};

}  // namespace kvx
