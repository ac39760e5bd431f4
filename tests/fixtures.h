// Test fixtures written by tools/kvx_tools/fixtures/make_fixtures.py: per model, the ONNX file, the converted kvx
// model directory, a token sequence and ONNX Runtime's logits for it (prefill, then one decode step per
// token). ctest points KVX_FIXTURES at them.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "engine/runtime/engine.h"
#include "kernels/kernels.h"

namespace kvx::test {

// A sliding-window fixture's run of tokens in chunks (each a forward pass on top of the cache of those before)
// with ONNX Runtime's logits for it, run the same way.
struct ChunkSchedule {
    std::string name;
    std::vector<int32_t> chunks;    // run sizes, summing to n_tokens
    std::vector<float> ref_logits;  // [n_tokens][vocab]
};

struct Fixture {
    std::string name;
    std::string model_dir;
    std::vector<int32_t> tokens;    // [n_tokens]
    std::vector<float> ref_logits;  // [n_tokens][vocab], ONNX Runtime
    int32_t n_prefill = 0;
    int32_t vocab = 0;
    double tolerance = 0;  // of max|ref| per position: 1e-4 for fp32 weights and compute, more where fp16 enters
    std::vector<ChunkSchedule> chunk_schedules;  // sliding-window fixtures only
};

// Every fixture under $KVX_FIXTURES; fails the test (not skips) when the variable or the files are missing.
std::vector<Fixture> load_fixtures();
Fixture load_fixture(const std::string& name);
// The fixture in dir, laid out as under $KVX_FIXTURES (meta.json, tokens.npy, ref_logits.npy, model/).
Fixture load_fixture_at(const std::string& dir, const std::string& name);

// Runs tokens[0, n_prefill) as one prefill and every later token as a decode step, returning the logits
// of every position [n_tokens][vocab], as kvx logits does.
std::vector<float> run_prefill_then_decode(const Model& model, const KernelTable& kernels,
                                           const std::vector<int32_t>& tokens, int32_t n_prefill,
                                           int32_t block_size = 16, KvDtype kv_dtype = KvDtype::f32);

// Runs tokens through a new sequence of the engine in the given chunks, one forward pass each with every row's
// logits, and frees it; returns [n_tokens][vocab]. after_pass(length) runs after each pass.
std::vector<float> run_chunks(Engine& engine, const std::vector<int32_t>& tokens, const std::vector<int32_t>& chunks,
                              const std::function<void(SeqId, int32_t)>& after_pass = {});

// The worst relative_max_error over the rows [from, to) of two [rows][vocab] logits arrays.
double worst_row_error(const std::vector<float>& logits, const std::vector<float>& ref, size_t vocab, size_t from,
                       size_t to);

// Whether a row of a multi-row pass gets the bits of a single-row decode step (speculative decoding relies
// on it): on a new sequence of the engine, tokens[0, first) as a prefill, then tokens[first, first + rows)
// one decode step each, and again, after a rewind to first, in one pass; compares the logits bit for bit.
bool multi_row_pass_equals_decode_steps(Engine& engine, std::span<const int32_t> tokens, size_t first, size_t rows);

// The kernel tables worth checking end to end: the reference oracle and every SIMD level this CPU runs.
std::vector<const KernelTable*> every_kernel_table();

// max_i |a_i - b_i| / max(max_i |b_i|, tiny), over one row of logits.
double relative_max_error(const float* a, const float* b, size_t n);

}  // namespace kvx::test
