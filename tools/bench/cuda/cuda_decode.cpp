// kvx_cuda_decode: decode tokens per second of a random-weight Llama (1B-class shapes by default) on the GPU,
// through kvx::Engine and the CUDA backend, at several batch sizes, each figure next to the bytes a step
// reads and the device's copy bandwidth measured in the same process.
//
//   kvx_cuda_decode [--batches 1,8,64] [--prompt 128] [--steps 128] [--cuda-graphs on|off] [--gemv hand|cublas]
//                   [--kv-dtype f32|f16] [--weights f16|f32] [--dim ...] [--json FILE] ...   (--help: all)
//
// Bytes per step = every weight once + the K and V of every sequence at the mean context of the timed steps:
// what a step must read at least, so GB/s over the copy bandwidth says how close decoding runs to the
// memory's speed. Exits 77 (skipped) when no CUDA device is usable.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "cuda/backend/cuda_backend.h"
#include "cuda/kernels/device_probe.h"
#include "engine/runtime/engine.h"
#include "kernels/error.h"
#include "tools/bench/cuda/copy_bandwidth.h"
#include "tools/bench/cuda/cuda_decode_run.h"
#include "tools/bench/support/random_llama.h"

namespace {

using kvx::bench::DecodeMeasurement;

constexpr int kSkipped = 77;  // ctest's SKIP_RETURN_CODE

struct Options {
    kvx::bench::LlamaShape shape;
    std::string weights = "f16";
    std::string kv_dtype = "f32";
    std::vector<int> batches = {1, 8, 64};
    int prompt = 128;
    int steps = 128;
    int block_size = 16;
    std::string cuda_graphs = "on";
    std::string gemv = "hand";
    int copy_mib = 1024;
    int copy_passes = 5;
    uint64_t seed = 1;
    std::string json_file;
};

void add_options(CLI::App& app, Options& o) {
    const CLI::Range kPositive(1, 1 << 24);  // every size and count; the bound only keeps products in range
    kvx::bench::LlamaShape& s = o.shape;
    app.add_option("--dim", s.dim, "Residual stream width")->capture_default_str()->check(kPositive);
    app.add_option("--hidden", s.hidden_dim, "MLP inner width")->capture_default_str()->check(kPositive);
    app.add_option("--layers", s.n_layers, "Decoder layers")->capture_default_str()->check(kPositive);
    app.add_option("--heads", s.n_heads, "Query heads")->capture_default_str()->check(kPositive);
    app.add_option("--kv-heads", s.n_kv_heads, "KV heads")->capture_default_str()->check(kPositive);
    app.add_option("--head-dim", s.head_dim, "Head width")->capture_default_str()->check(kPositive);
    app.add_option("--vocab", s.vocab_size, "Vocabulary size")->capture_default_str()->check(kPositive);
    app.add_option("--weights", o.weights, "Weight matrices' dtype")->capture_default_str()->check(CLI::IsMember({"f16", "f32"}));
    app.add_option("--kv-dtype", o.kv_dtype, "What the KV cache stores")->capture_default_str()->check(CLI::IsMember({"f32", "f16"}));
    app.add_option("--batches", o.batches, "Batch sizes (sequences decoding together), comma-separated")
        ->delimiter(',')
        ->capture_default_str()
        ->check(kPositive);
    app.add_option("--prompt", o.prompt, "Prompt tokens prefilled per sequence")->capture_default_str()->check(kPositive);
    app.add_option("--steps", o.steps, "Timed decode steps")->capture_default_str()->check(kPositive);
    app.add_option("--block-size", o.block_size, "Tokens per KV block")->capture_default_str();
    app.add_option("--cuda-graphs", o.cuda_graphs, "Capture and replay decode steps")->capture_default_str()->check(CLI::IsMember({"on", "off"}));
    app.add_option("--gemv", o.gemv, "Decode matrix products: the hand GEMV, or cuBLAS for all")
        ->capture_default_str()
        ->check(CLI::IsMember({"hand", "cublas"}));
    app.add_option("--copy-mib", o.copy_mib, "MiB copied to measure the device's copy bandwidth")->capture_default_str()->check(kPositive);
    app.add_option("--copy-passes", o.copy_passes, "Timed copies, the median kept")->capture_default_str()->check(kPositive);
    app.add_option("--seed", o.seed, "Seed of the random weights and tokens")->capture_default_str();
    app.add_option("--json", o.json_file, "Also write the results as JSON to this file");
}

std::string shape_line(const Options& o, double weight_bytes) {
    const kvx::bench::LlamaShape& s = o.shape;
    char line[320];
    std::snprintf(line, sizeof line,
                  "model: random Llama, dim %d, hidden %d, %d layers, %d heads / %d KV heads x %d, vocab %d, %s weights "
                  "(%.2f GB on the device), %s KV cache, block %d",
                  s.dim, s.hidden_dim, s.n_layers, s.n_heads, s.n_kv_heads, s.head_dim, s.vocab_size, o.weights.c_str(),
                  weight_bytes / 1e9, o.kv_dtype.c_str(), o.block_size);
    return line;
}

void print_table(const std::vector<DecodeMeasurement>& runs, double copy_gbps) {
    std::printf("%6s %10s %9s %9s %8s %8s %8s %16s\n", "batch", "tokens/s", "ms/step", "mean ctx", "GB/step", "GB/s",
                "of copy", "graphs cap/play");
    for (const DecodeMeasurement& m : runs)
        std::printf("%6d %10.1f %9.3f %9.1f %8.3f %8.1f %8.3f %8lld/%-7lld\n", m.batch, m.tokens_per_second(),
                    m.ms_per_step(), m.mean_context, m.bytes_per_step() / 1e9, m.gbps(), m.gbps() / copy_gbps,
                    static_cast<long long>(m.graph_captures), static_cast<long long>(m.graph_replays));
}

void write_json(const std::string& path, const Options& o, const std::string& device, double copy_gbps,
                const std::vector<DecodeMeasurement>& runs) {
    const kvx::bench::LlamaShape& s = o.shape;
    nlohmann::json j;
    j["device"] = device;
    j["copy_GBps"] = copy_gbps;
    j["copy_mib"] = o.copy_mib;
    j["model"] = {{"dim", s.dim},           {"hidden_dim", s.hidden_dim}, {"n_layers", s.n_layers},
                  {"n_heads", s.n_heads},   {"n_kv_heads", s.n_kv_heads}, {"head_dim", s.head_dim},
                  {"vocab_size", s.vocab_size}, {"weights", o.weights}};
    j["options"] = {{"kv_dtype", o.kv_dtype}, {"block_size", o.block_size}, {"prompt", o.prompt}, {"steps", o.steps},
                    {"cuda_graphs", o.cuda_graphs}, {"gemv", o.gemv}};
    for (const DecodeMeasurement& m : runs)
        j["runs"].push_back({{"batch", m.batch},
                             {"steps", m.steps},
                             {"seconds", m.seconds},
                             {"tokens_per_s", m.tokens_per_second()},
                             {"ms_per_step", m.ms_per_step()},
                             {"mean_context", m.mean_context},
                             {"weight_bytes", m.weight_bytes},
                             {"kv_bytes_per_step", m.kv_bytes_per_step},
                             {"bytes_per_step", m.bytes_per_step()},
                             {"GBps", m.gbps()},
                             {"frac_of_copy_bw", m.gbps() / copy_gbps},
                             {"graph_captures", m.graph_captures},
                             {"graph_replays", m.graph_replays}});
    std::ofstream out(path);
    out << j.dump(2) << "\n";
    if (!out) throw kvx::Error("cannot write the JSON results to '" + path + "'");
}

int run(const Options& o) {
    const double copy_gbps =
        kvx::cuda::measure_copy_bandwidth(static_cast<size_t>(o.copy_mib) << 20, o.copy_passes).median();
    const std::string device = kvx::cuda::device_description();
    std::printf("kvx_cuda_decode: %s; device-to-device copy %.1f GB/s (median of %d, %d MiB)\n", device.c_str(),
                copy_gbps, o.copy_passes, o.copy_mib);

    // Every sequence holds its prompt, the warm-up step's token and the timed steps' tokens.
    const int context = o.prompt + 1 + o.steps;
    kvx::bench::LlamaShape shape = o.shape;
    shape.weights_dtype = o.weights == "f16" ? kvx::WeightDtype::f16 : kvx::WeightDtype::f32;
    const kvx::bench::RandomLlama llama(shape, context, o.seed);

    kvx::cuda::CudaBackendOptions backend_options;
    backend_options.cuda_graphs = o.cuda_graphs == "on";
    backend_options.hand_gemv = o.gemv == "hand";
    auto backend = std::make_unique<kvx::cuda::CudaBackend>(llama.model(), backend_options);
    const kvx::cuda::CudaBackend& cuda_backend = *backend;  // owned by the engine from here on

    kvx::EngineOptions engine_options;
    engine_options.context = context;
    engine_options.block_size = o.block_size;
    engine_options.kv_dtype = o.kv_dtype == "f16" ? kvx::KvDtype::f16 : kvx::KvDtype::f32;
    const int max_batch = *std::max_element(o.batches.begin(), o.batches.end());
    engine_options.num_blocks = max_batch * ((context + o.block_size - 1) / o.block_size);
    kvx::Engine engine(llama.model().config, std::move(backend), engine_options);

    std::printf("%s\n", shape_line(o, static_cast<double>(cuda_backend.weight_bytes())).c_str());
    std::printf("run: %d prompt tokens per sequence, %d timed decode steps after 1 warm-up step; CUDA graphs %s, "
                "GEMV %s\n\n",
                o.prompt, o.steps, o.cuda_graphs.c_str(), o.gemv.c_str());
    std::vector<DecodeMeasurement> runs;
    for (int batch : o.batches)
        runs.push_back(kvx::bench::measure_decode(engine, cuda_backend, batch, o.prompt, o.steps, o.seed + static_cast<uint64_t>(batch)));
    print_table(runs, copy_gbps);
    if (!o.json_file.empty()) write_json(o.json_file, o, device, copy_gbps, runs);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"kvx_cuda_decode: decode tokens/s of a random-weight Llama on the GPU against the copy bandwidth"};
    Options options;
    add_options(app, options);
    CLI11_PARSE(app, argc, argv);

    const std::string unavailable = kvx::cuda::unavailable_reason();
    if (!unavailable.empty()) {
        std::fprintf(stderr, "kvx_cuda_decode: skipped: %s\n", unavailable.c_str());
        return kSkipped;
    }
    try {
        return run(options);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "kvx_cuda_decode: %s\n", e.what());
        return 1;
    }
}
