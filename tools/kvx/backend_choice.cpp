#include "backend_choice.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <omp.h>

#include "cpu/backend/cpu_backend.h"
#include "cpu/kernels/cpu_kernels.h"
#include "cuda_plugin_loader.h"
#include "data_dir.h"
#include "kernels/error.h"
#include "kernels/kernels.h"

namespace kvx::cli {
namespace {

const KernelTable& kernels_for(const std::string& simd) {
    if (simd == "reference") return reference_kernels();
    if (simd == "auto") return cpu::cpu_kernels(cpu::best_simd_level());
    if (const std::optional<cpu::SimdLevel> level = cpu::simd_level_named(simd)) return cpu::cpu_kernels(*level);
    throw Error("unknown --simd '" + simd + "' (use auto, avx512vnni, avx512, avx2, portable or reference)");
}

// --simd, else $KVX_SIMD where --simd is auto.
std::string chosen_simd(const RunOptions& options) {
    if (options.simd == "auto")
        if (const char* env = std::getenv("KVX_SIMD"); env && *env) return env;
    return options.simd;
}

// --device, checked against the other flags, and the CUDA plugin loaded, before the model loads.
void check_device(const RunOptions& options) {
    if (options.device == "cpu") return;
    if (options.device != "cuda") throw Error("unknown --device '" + options.device + "' (use cpu or cuda)");
    if (options.simd != "auto")
        throw Error("--simd " + options.simd + " chooses CPU kernels: it cannot go with --device cuda");
    load_cuda_plugin();
}

std::unique_ptr<Backend> make_backend(const Model& model, const RunOptions& options) {
    if (options.device == "cuda") return make_cuda_backend(model);
    return std::make_unique<cpu::CpuBackend>(model, kernels_for(chosen_simd(options)));
}

}  // namespace

KvDtype kv_dtype_for(const std::string& name) {
    if (name == "f32") return KvDtype::f32;
    if (name == "f16") return KvDtype::f16;
    throw Error("unknown --kv-dtype '" + name + "' (use f32 or f16)");
}

void add_run_options(CLI::App& command, RunOptions& o) {
    command.add_option("-m,--model", o.model_dir, "Model directory written by 'kvx convert', or a GGUF file (default: the built-in stories260K)");
    command.add_option("-t,--threads", o.threads, "CPU threads (default: every core)")->check(CLI::NonNegativeNumber);
    command.add_option("-c,--context", o.context, "Most tokens the sequence may hold (default: the model's maximum)")
        ->check(CLI::NonNegativeNumber);
    command.add_option("--block-size", o.block_size, "Tokens per KV cache block: a power of two from 1 to 256")
        ->capture_default_str();
    command.add_option("--kv-dtype", o.kv_dtype,
                       "What the KV cache stores: f32, or f16 (half the cache memory and the bytes a decode step "
                       "reads; attention still computes in fp32)")
        ->capture_default_str();
    command.add_option("--device", o.device, "Where the model runs: cpu, or cuda (GPU 0)")->capture_default_str();
    command.add_flag("--check-weights", o.check_weights,
                     "Read every weight before running and refuse the model if one is NaN or infinite (the "
                     "converter checks this when it writes a model)");
    command.add_option("--simd", o.simd,
                       "CPU kernels: auto, avx512vnni, avx512, avx2, portable, or reference (the plain fp32 oracle); "
                       "the KVX_SIMD environment variable sets the default")
        ->capture_default_str();
}

std::string resolve_model_dir(const std::string& requested) {
    if (!requested.empty()) return requested;
    if (const char* env = std::getenv("KVX_MODEL"); env && *env) return env;
    const std::filesystem::path built_in = data_dir() / "models" / "stories260K";
    if (!std::filesystem::exists(built_in / "config.json"))
        throw Error("the built-in model is missing from '" + built_in.string() +
                    "' (it is built when Python with onnx is available, see README): pass -m MODEL_DIR");
    return built_in.string();
}

LoadedModel load_model_for_run(const RunOptions& options) {
    // An unknown --simd, --kv-dtype or --device fails before the model loads.
    const KernelTable& kernels = kernels_for(chosen_simd(options));
    kv_dtype_for(options.kv_dtype);
    check_device(options);
    if (options.threads > 0) omp_set_num_threads(options.threads);
    LoadedModel loaded;
    // A GGUF's quantized matrices go straight into the layout the CPU kernels read (weight_copies.h).
    const QuantLayout layout = options.device == "cpu" ? kernels.matmul_q_layout : QuantLayout::rows;
    loaded.model = std::make_unique<Model>(load_model(resolve_model_dir(options.model_dir), layout));
    if (options.check_weights) check_weights_finite(*loaded.model);
    return loaded;
}

void start_engine(LoadedModel& loaded, const RunOptions& options, int32_t num_blocks, int32_t max_chunk) {
    EngineOptions engine_options;
    engine_options.max_chunk = max_chunk;
    engine_options.context = options.context;
    engine_options.block_size = options.block_size;
    engine_options.num_blocks = num_blocks;
    engine_options.kv_dtype = kv_dtype_for(options.kv_dtype);
    loaded.engine = std::make_unique<Engine>(
        loaded.model->config,
        make_backend(*loaded.model, options), engine_options);
}

LoadedModel load_for_run(const RunOptions& options) {
    LoadedModel loaded = load_model_for_run(options);
    start_engine(loaded, options);
    return loaded;
}

void print_weight_format(const Model& model) {
    std::fprintf(stderr, "kvx: weights %s\n", weight_format(model).c_str());
}

void print_peak_rss() {
    std::ifstream status("/proc/self/status");
    std::string key;
    long long kib = 0;
    while (status >> key) {
        if (key == "VmHWM:" && status >> kib) {
            std::fprintf(stderr, "kvx: peak RSS %.1f MiB\n", static_cast<double>(kib) / 1024.0);
            return;
        }
        status.ignore(1 << 20, '\n');
    }
}

}  // namespace kvx::cli
