// The CUDA kernels' launch functions: the device counterpart of kernels/kernels.h's KernelTable (and of
// kernels/baseline_kernels.h's contiguous-cache baselines, which only benchmarks and tests call).
//
// Every function enqueues its work on `stream` and returns at once; every pointer is a device pointer
// unless its comment says host. Shapes, layouts and arithmetic are those of the same-named KernelTable
// kernel (kernels/kernels.h), which is the oracle the tests hold these to: fp32 activations, row-major,
// weights [out_features][in_features] in fp32 or IEEE fp16 bits, the paged cache
// [num_blocks][n_kv_heads][block_size][head_dim] per layer. Kernels never allocate and keep no state
// between calls, so a captured CUDA graph can replay any sequence of them.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/baseline_kernels.h"
#include "kernels/kernels.h"
#include "kernels/quant_matrix.h"

namespace kvx::cuda {

// ---- Norms, rotary embedding, activations, residuals (cuda/kernels/elementwise.cu) ----

void rmsnorm(float* out, const float* x, const float* weight, int n, int d, float eps, cudaStream_t stream);
void layernorm(float* out, const float* x, const float* weight, const float* bias, int n, int d, float eps,
               cudaStream_t stream);
// The residual add fused with the next block's norm, one pass over x instead of two:
//   x[i][:] += y[i][:]; out[i][:] = rmsnorm(x[i][:])       (x [n][d] updated in place; out [n][d])
void add_rmsnorm(float* out, float* x, const float* y, const float* weight, int n, int d, float eps, cudaStream_t stream);
void add_layernorm(float* out, float* x, const float* y, const float* weight, const float* bias, int n, int d,
                   float eps, cudaStream_t stream);

// cos [n_rows][half], sin [n_rows][half] of angle = float(positions[r]) * inv_freq[i] in fp32, as the engine
// computes them on the host (inv_freq [half]).
void rope_tables(float* cos, float* sin, const int32_t* positions, const float* inv_freq, int n_rows, int half,
                 cudaStream_t stream);
// KernelTable::rope: x [n_rows][n_heads][head_dim], the first rotary_dim (<= head_dim; the config's is even)
// elements of each head rotated in place with the tables above (half = rotary_dim / 2), the rest left as they are.
void rope(float* x, const float* cos, const float* sin, int n_rows, int n_heads, int head_dim, int rotary_dim,
          cudaStream_t stream);

void swiglu(float* out, const float* gate, const float* up, int64_t n, cudaStream_t stream);
void geglu_tanh(float* out, const float* gate, const float* up, int64_t n, cudaStream_t stream);
void gelu_tanh(float* out, const float* x, int64_t n, cudaStream_t stream);
void gelu_erf(float* out, const float* x, int64_t n, cudaStream_t stream);
// KernelTable::softcap: x[i] = cap * tanh(x[i] / cap) in place, cap > 0 (Gemma 2's final logits).
void softcap(float* x, int64_t n, float cap, cudaStream_t stream);
// KernelTable::clamp: x[i] = min(max(x[i], -c), c) in place, c > 0, a NaN kept (OLMo's clip_qkv).
void clamp(float* x, int64_t n, float c, cudaStream_t stream);
// KernelTable::scale: x[i] *= s in place, one fp32 product (Granite's residual and logit multipliers).
void scale(float* x, int64_t n, float s, cudaStream_t stream);
void add(float* x, const float* y, int64_t n, cudaStream_t stream);
void add_bias(float* x, const float* bias, int n, int d, cudaStream_t stream);

// x [n_rows][dim] = table[tokens[r]] as fp32 times scale (one fp32 product; Gemma's embedding scale, else 1)
// (+ pos_table[positions[r]] when pos_table is not null: GPT-2's learned positions). Both tables [rows][dim],
// fp32 or fp16 bits as table_f16 / pos_f16 say.
void embed(float* x, const int32_t* tokens, const void* table, bool table_f16, float scale, const void* pos_table,
           bool pos_f16, const int32_t* positions, int n_rows, int dim, cudaStream_t stream);

// out [n][d] = x [rows[i]][d]: the rows whose logits are wanted, before the final norm.
void gather_rows(float* out, const float* x, const int32_t* rows, int n, int d, cudaStream_t stream);

// out [n] = x [n] rounded to fp16 bits (nearest, ties to even): activations for cublasGemmEx.
void f32_to_f16(uint16_t* out, const float* x, int64_t n, cudaStream_t stream);

// ---- KV cache operations (cuda/kernels/kv_cache_ops.cu) ----

// KernelTable::kv_append (fp32 cache) and kv_append_f16 (fp16 cache) in one: k, v [n_rows][n_kv_heads][head_dim];
// slots [n_rows] (-1: skip the row).
void kv_append(void* k_cache, void* v_cache, KvDtype kv_dtype, const float* k, const float* v, const int64_t* slots,
               int n_rows, int n_kv_heads, int head_dim, int block_size, cudaStream_t stream);
// KernelTable::copy_blocks: pairs [n_pairs] in device memory.
void copy_blocks(void* k_cache, void* v_cache, const BlockCopy* pairs, int n_pairs, int64_t block_elems,
                 int elem_bytes, cudaStream_t stream);
// BaselineKernelTable::reorder_beams: beam_indices [n_beams] in device memory.
void reorder_beams(void* new_k, void* new_v, const void* old_k, const void* old_v, const int32_t* beam_indices,
                   int n_beams, int64_t beam_elems, int elem_bytes, cudaStream_t stream);

// ---- Decode GEMV (cuda/kernels/gemv.cu) ----

// out [n][m] = x [n][k] . w [m][k]^T (+ bias [m] when not null), for 1 <= n <= kGemvMaxRows: the matrix
// products of a decode step, which read every weight once and so are bound by memory bandwidth. fp32
// accumulation; fp16 weights are converted exactly as they are read. Larger n goes to cuBLAS (cuda/backend/blas.h).
constexpr int kGemvMaxRows = 8;
void gemv_f32(float* out, const float* x, const float* w, const float* bias, int n, int k, int m, cudaStream_t stream);
void gemv_f16(float* out, const float* x, const uint16_t* w, const float* bias, int n, int k, int m,
              cudaStream_t stream);

// ---- Quantized weights (cuda/kernels/gemv_quant.cu, cuda/kernels/dequantize.cu) ----
//
// w is a q8 / q4 QuantMatrix (kernels/quant_matrix.h) whose q, scales and offsets are device pointers, of
// [rows][cols] with padded_cols = quant_padded_cols(cols, block). Each weight is computed as the reference's
// dequantize_row computes it. A malformed w (bits, block, padded_cols, null or misaligned tables) throws kvx::Error.

// KernelTable::matmul_q (+ bias [m] when not null) for 1 <= n <= kGemvMaxRows: out [n][m] = x [n][k] . w^T,
// w [m][k], dequantized in registers, fp32 accumulation.
void gemv_quant(float* out, const float* x, const QuantMatrix& w, const float* bias, int n, int k, int m,
                cudaStream_t stream);
// out [rows][cols] = w rounded to fp16 bits (nearest, ties to even), the row padding dropped: the weights of a
// prefill's cublasGemmEx.
void dequantize_f16(uint16_t* out, const QuantMatrix& w, int rows, int cols, cudaStream_t stream);
// out [n_rows][cols] = w [indices[r]] * scale in fp32, or out += that when accumulate (indices [n_rows] in
// 0 .. rows - 1): an embedding lookup in a quantized table, as WeightMatrix::row_to_f32 then the scale.
void dequantize_rows(float* out, const int32_t* indices, const QuantMatrix& w, int n_rows, int cols, float scale,
                     bool accumulate, cudaStream_t stream);

// ---- Attention over the paged cache (cuda/kernels/paged_attention.cu) ----
//
// The work of one call is cut three ways:
//   tiles       AttentionTile: consecutive batch rows of one sequence times some query heads of one GQA
//               group. A tile's query vectors (at most kTileQueries) share every key and value they read,
//               so a prefill chunk or a decode row's GQA group reads each K/V position once per tile.
//   KV heads    one grid dimension.
//   partitions  the tile's key range split into pieces of partition_tokens keys, so that one long decode
//               row still fills the GPU (flash-decoding); a second pass merges the pieces' softmax states.
// Grid: tiles x n_kv_heads x n_partitions. A partition past a tile's last key writes an empty state.

constexpr int kTileQueries = 16;  // query vectors (row, head) per tile
constexpr int kKeyChunk = 32;     // keys staged in shared memory at a time; partition_tokens is a multiple
constexpr int kMaxHeadDim = 256;

struct AttentionTile {
    int32_t row_begin;   // first batch row; rows row_begin .. row_begin + n_rows - 1 share one block table
    int32_t n_rows;
    int32_t head_begin;  // first query head of the tile within its GQA group, 0 .. group_size - 1
    int32_t n_heads;     // n_rows * n_heads <= kTileQueries
};

// Host: cuts a batch into tiles. row_seq [n_rows] (host) as in PagedAttentionArgs; group_size = n_heads /
// n_kv_heads. Rows of one sequence must be consecutive to share a tile; any row order is still correct.
std::vector<AttentionTile> plan_attention_tiles(std::span<const int32_t> row_seq, int group_size);

struct AttentionPartitions {
    int n_partitions = 1;       // 1: each tile writes its output directly and no merge pass runs
    int partition_tokens = 0;   // keys per partition, a multiple of kKeyChunk
};

// Host: the partitions for a launch of n_tiles tiles whose longest key range is max_span keys (for a CUDA
// graph: the most its bucket can hold), on a device of sm_count SMs: split until the grid fills the device
// about twice over, never into more than max_partitions pieces (the workspace's capacity).
AttentionPartitions plan_attention_partitions(int n_tiles, int n_kv_heads, int max_span, int sm_count,
                                              int max_partitions);

// Floats of workspace a launch with this many rows and partitions needs (0 for one partition).
size_t attention_workspace_floats(int n_rows, int n_heads, int head_dim, int n_partitions);

// KernelTable::paged_attention on the device: args' pointers are device pointers (q, caches, block_tables,
// row_seq, row_pos, out); tiles [n_tiles] is device memory written from plan_attention_tiles; workspace holds
// attention_workspace_floats(...) floats. Throws kvx::Error for head_dim > kMaxHeadDim.
void paged_attention(const PagedAttentionArgs& args, const AttentionTile* tiles, int n_tiles,
                     const AttentionPartitions& partitions, float* workspace, cudaStream_t stream);
// The same kernel over a contiguous cache (ContiguousAttentionArgs): the baseline that measures what paging
// costs.
void contiguous_attention(const ContiguousAttentionArgs& args, const AttentionTile* tiles, int n_tiles,
                          const AttentionPartitions& partitions, float* workspace, cudaStream_t stream);

// ---- Token selection on the device (cuda/kernels/sampling.cu) ----

// tokens [n_rows] = the index of the largest of logits [n_rows][vocab] (the lowest index wins a tie), as
// engine/runtime/sampler.h's argmax.
void argmax(int32_t* tokens, const float* logits, int n_rows, int vocab, cudaStream_t stream);

// Sampler::sample's temperature > 0 path for one row, with the same result bit for bit: probabilities
// exp((logit - max) / T) computed in double and stored as float, the top_k most probable (ties: lower index
// first) sorted, the top_p prefix of them, then the token where the running sum first exceeds
// uniform * total (uniform from std::generate_canonical on the host's generator). Needs
// 1 <= top_k <= kMaxDeviceTopK. scratch holds sampling_scratch_bytes(vocab) bytes.
constexpr int kMaxDeviceTopK = 1024;
size_t sampling_scratch_bytes(int vocab);
void sample_top_k_top_p(int32_t* token, const float* logits, int vocab, float temperature, int top_k, float top_p,
                        double uniform, void* scratch, cudaStream_t stream);

}  // namespace kvx::cuda
