// Flags shared by the commands that run a model, and the construction of model + backend + engine they
// describe.
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "engine/model/model.h"
#include "engine/runtime/engine.h"

namespace kvx::cli {

struct RunOptions {
    std::string model_dir;          // empty = the default model built with kvx
    std::string device = "cpu";     // cpu | cuda
    std::string simd = "auto";      // auto | avx512vnni | avx512 | avx2 | portable | reference (cpu only)
    int threads = 0;                // 0 = every core
    int context = 0;                // 0 = the model's max_seq_len
    int block_size = 16;
    std::string kv_dtype = "f32";   // f32 | f16: what the KV cache stores
    bool check_weights = false;     // read every weight for NaN and infinity before running
};

void add_run_options(CLI::App& command, RunOptions& options);

// --kv-dtype's value as the engine's dtype; throws kvx::Error for another name.
KvDtype kv_dtype_for(const std::string& name);

// The model directory to use: the one asked for, else $KVX_MODEL, else the built-in model in kvx's data
// folder (data_dir.h; a kvx::Error when that was not built).
std::string resolve_model_dir(const std::string& requested);

// A loaded model and an engine over it. The engine's backend points into the model, so they live together.
struct LoadedModel {
    std::unique_ptr<Model> model;
    std::unique_ptr<Engine> engine;
};

// Throws kvx::Error for every bad choice (unknown --simd or --device, a level the CPU lacks, --device cuda
// without a GPU or in a build without CUDA, a missing model, ...).
LoadedModel load_for_run(const RunOptions& options);
// The same in two steps, for a command that sizes the KV pool from the prompt (beam search): the model
// alone (engine null), then its engine with num_blocks blocks (0 = one sequence of the whole context) and
// passes of at most max_chunk tokens per sequence (0 = the context).
LoadedModel load_model_for_run(const RunOptions& options);
void start_engine(LoadedModel& loaded, const RunOptions& options, int32_t num_blocks = 0, int32_t max_chunk = 0);

// "kvx: weights q4 block 32 (fp16 scales), f32 embedding": the stats line naming how the matrices are stored.
void print_weight_format(const Model& model);
// "kvx: peak RSS 647.2 MiB": this process's resident high-water mark (VmHWM of /proc/self/status), where the
// system reports one. Not getrusage's ru_maxrss, which keeps the RSS of the process that started kvx when it
// forked (a Python test's 200 MB), across the exec.
void print_peak_rss();

}  // namespace kvx::cli
