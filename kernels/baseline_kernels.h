// Kernels over the cache layout kvx's paged cache replaces: one fixed-capacity region per sequence, as ONNX
// Runtime GenAI's past_key_values keep it. The forward pass never calls them. They stay as baselines:
// kvx-bench measures paged attention against contiguous attention and copy-on-write block copies against a
// physical beam reorder, and every backend's copy is tested against the reference, so those comparisons
// are between kernels equally right. A table apart from KernelTable, so that the production table holds
// exactly what the engine runs.
#pragma once

#include <cstdint>

namespace kvx {

// Attention over a contiguous cache, with PagedAttentionArgs's rows, positions, window, GQA and scale:
//
//   k_cache [n_seqs][n_kv_heads][max_seq][head_dim]   position p of sequence s at [s][kv_head][p]
//
// fp32 only.
struct ContiguousAttentionArgs {
    const float* q = nullptr;              // [n_rows][n_heads][head_dim]
    const float* k_cache = nullptr;        // [n_seqs][n_kv_heads][max_seq][head_dim]
    const float* v_cache = nullptr;        // [n_seqs][n_kv_heads][max_seq][head_dim]
    const int32_t* row_seq = nullptr;      // [n_rows], which sequence's region the row reads
    const int32_t* row_pos = nullptr;      // [n_rows], absolute position of the row's token, < max_seq
    float* out = nullptr;                  // [n_rows][n_heads][head_dim]
    int n_rows = 0;
    int n_heads = 0;
    int n_kv_heads = 0;
    int head_dim = 0;
    int max_seq = 0;
    int window = 0;
    float scale = 1.0f;
};

struct BaselineKernelTable {
    const char* name;

    void (*contiguous_attention)(const ContiguousAttentionArgs& args);

    // The physical beam reorder of a contiguous cache (ONNX Runtime GenAI's beam search), out of place:
    //   new_k[i] = old_k[beam_indices[i]],  new_v[i] = old_v[beam_indices[i]]  for i < n_beams,
    // each beam's region [n_kv_heads][max_seq][head_dim] = beam_elems elements of elem_bytes bytes.
    void (*reorder_beams)(void* new_k, void* new_v, const void* old_k, const void* old_v, const int32_t* beam_indices,
                          int n_beams, int64_t beam_elems, int elem_bytes);
};

// The plain loops of kernels/reference.cpp, the oracle for the baselines too.
const BaselineKernelTable& reference_baseline_kernels();

}  // namespace kvx
