// The backend-neutral kernel contract.
//
// A KernelTable is one implementation of it on the CPU: the plain reference (kernels/reference.cpp) or one
// SIMD level of cpu/kernels/. The CPU backend (cpu/backend/) calls kernels only through the table it is given,
// so the reference table doubles as the oracle the SIMD tables are tested against. The CUDA kernels
// (cuda/kernels/cuda_kernels.h) are launch functions rather than a table; each keeps the shapes, layouts and
// arithmetic of the same-named kernel here, and is tested against the same reference.
//
// Conventions shared by every kernel:
//   - fp32 activations, row-major, no padding between rows unless a stride is given. Weight matrices may
//     also be stored as IEEE fp16 (the matmul_f16 kernel), converted to fp32 as they are read, or as blocks
//     of 8- or 4-bit integers (matmul_q, kernels/quant_matrix.h).
//   - A linear layer's weight is stored [out_features, in_features] (each output is a dot product of two
//     contiguous rows), the llama2.c / safetensors convention; the converter transposes ONNX's [in, out].
//   - Kernels never allocate on the hot path and never keep state between calls.
//   - Kernels may use OpenMP internally; they respect omp_get_max_threads().
#pragma once

#include <cstdint>

#include "kernels/block_copy.h"
#include "kernels/quant_matrix.h"

namespace kvx {

// Attention of a batch of query rows over a paged KV cache, for one layer.
//
// Each query row belongs to one sequence (row_seq) and sits at an absolute position (row_pos); it attends
// causally to that sequence's keys at positions first .. row_pos, which must already be in the cache (the
// engine appends the batch's own K/V first). A batch may therefore mix a prefill chunk of one sequence
// with decode rows of others.
//
// Sliding window: window == 0 is full causal attention, first = 0. window = W > 0 lets a query see its W
// most recent positions, itself included: first = max(0, row_pos - W + 1) (Mistral's and ONNX Runtime's
// convention; W >= row_pos + 1 is full attention). Positions before first are never read, nor are their
// block table entries: a block wholly before every row's window may have been released (entry -1).
//
// Cache layout (one layer; K and V alike), one physical block = block_size consecutive token positions:
//
//   k_cache [num_blocks][n_kv_heads][block_size][head_dim]
//            ^ physical block id from the sequence's block table
//
//   position p of sequence s lives in block  block_tables[s * table_stride + p / block_size]
//                                  at offset p % block_size
//
// Grouped-query attention: query head h reads KV head h / (n_heads / n_kv_heads).
//
// Cache element type (kv_dtype): fp32, or IEEE fp16 bits (kernels/f16.h) to halve the bytes a decode
// step reads; k_cache and v_cache then point at uint16_t. Scores, softmax and the weighted sum are fp32
// either way (the reference: double), so fp16 changes only what is stored, once, by kv_append_f16.
enum class KvDtype : int32_t { f32, f16 };

struct PagedAttentionArgs {
    const float* q = nullptr;              // [n_rows][n_heads][head_dim]
    const void* k_cache = nullptr;         // [num_blocks][n_kv_heads][block_size][head_dim] of kv_dtype
    const void* v_cache = nullptr;         // [num_blocks][n_kv_heads][block_size][head_dim] of kv_dtype
    const int32_t* block_tables = nullptr; // [n_seqs][table_stride], physical block ids
    const int32_t* row_seq = nullptr;      // [n_rows], which block table the row uses
    const int32_t* row_pos = nullptr;      // [n_rows], absolute position of the row's token
    float* out = nullptr;                  // [n_rows][n_heads][head_dim]
    int n_rows = 0;
    int n_heads = 0;
    int n_kv_heads = 0;
    int head_dim = 0;
    int block_size = 0;
    int table_stride = 0;
    int window = 0;                        // 0: full causal; W > 0: positions row_pos - W + 1 .. row_pos
    KvDtype kv_dtype = KvDtype::f32;
    float scale = 1.0f;                    // usually 1 / sqrt(head_dim)
    // Attention logit soft-cap (Gemma 2): each scaled score s becomes softcap * tanh(s / softcap) before
    // the softmax. 0: none.
    float softcap = 0.0f;
};

// One matmul of a group sharing an input (KernelTable::matmuls): out [n][m] = x . w^T with w [m][k] stored
// as fp32 (w_f32), as IEEE fp16 bits in rows (w_f16) or in row groups (w_f16_groups), or quantized (w_q);
// exactly one of the four is set.
struct MatmulPart {
    float* out = nullptr;                    // [n][m]
    const float* w_f32 = nullptr;            // [m][k], or null
    const uint16_t* w_f16 = nullptr;         // [m][k] fp16 bits, or null
    const uint16_t* w_f16_groups = nullptr;  // [ceil(m / 8)][ceil(k / 16)][8][16] fp16 bits, or null
                                             // (kernels/f16_row_groups.h)
    const QuantMatrix* w_q = nullptr;        // [m][k] in integer blocks, or null
    int m = 0;
};

struct KernelTable {
    const char* name;

    // out[n][m] = x[n][k] . w[m][k]^T. n == 1 is the decode GEMV; n > 1 the prefill GEMM.
    void (*matmul)(float* out, const float* x, const float* w, int n, int k, int m);

    // As matmul, with w [m][k] stored as IEEE fp16 bits (kernels/f16.h); products accumulate in fp32.
    // Halves the bytes of weights a bandwidth-bound decode step reads.
    void (*matmul_f16)(float* out, const float* x, const uint16_t* w, int n, int k, int m);

    // As matmul, with w [m][k] quantized (kernels/quant_matrix.h). The reference dequantizes each weight to
    // fp32 and sums in double. The SIMD levels first round each row of x to int8 in blocks of 32 (one fp32
    // scale per block, amax / 127; q = round(x / scale), as ONNX Runtime's accuracy_level 4 does, or, for a
    // matrix whose x_rounding is ggml, q = round(x * (127 / amax)) with the scale rounded to fp16, as
    // llama.cpp does; for ggml_k one fp32 scale per 256, llama.cpp's Q8_K) and take integer dot products, block
    // by block; their error against the reference is that rounding's, at most sum_j |w_j| * scale_x(j) / 2 per
    // output (plus the fp16 scale's 2^-11 for ggml).
    void (*matmul_q)(float* out, const float* x, const QuantMatrix& w, int n, int k, int m);

    // The layout matmul_q reads fastest; it reads every layout. A backend may copy the matrices that fit it
    // (kernels/quant_row_groups.h) once, at load time.
    QuantLayout matmul_q_layout;
    // Whether matmuls reads fp16 weights faster in row groups (MatmulPart::w_f16_groups) than in rows; it
    // reads both, with the same bits. A backend may copy them once, at load time.
    bool matmul_f16_row_groups;

    // Several matmuls of the same x [n][k] (a layer's q, k and v projections; its gate and up): each part
    // gets the bits matmul / matmul_f16 would give it alone. A backend may run them as one piece of work, so
    // that a decode step pays one thread wake-up for the group instead of one per small GEMV.
    void (*matmuls)(const MatmulPart* parts, int n_parts, const float* x, int n, int k);

    // out[i][:] = x[i][:] / sqrt(mean(x[i][:]^2) + eps) * weight[:], for i < n rows of width d.
    // out may alias x.
    void (*rmsnorm)(float* out, const float* x, const float* weight, int n, int d, float eps);

    // LayerNorm (GPT-2): out[i][:] = (x[i][:] - mean) / sqrt(var + eps) * weight[:] + bias[:], with the
    // biased variance mean((x - mean)^2), for i < n rows of width d. out may alias x.
    void (*layernorm)(float* out, const float* x, const float* weight, const float* bias, int n, int d, float eps);

    // Rotary embedding in the "rotate half" form (HF Llama, GPT-NeoX) on the first rotary_dim elements of
    // each head (even, <= head_dim; GPT-NeoX's partial rotary rotates fewer than head_dim, the rest pass
    // through unchanged): element j < rotary_dim/2 pairs with element j + rotary_dim/2:
    //   x1' = x1 * cos - x2 * sin,   x2' = x2 * cos + x1 * sin
    // x [n_rows][n_heads][head_dim] in place; cos, sin [n_rows][rotary_dim/2] (computed once per forward
    // pass by the backend from the positions and the model's inverse frequencies).
    void (*rope)(float* x, const float* cos, const float* sin, int n_rows, int n_heads, int head_dim, int rotary_dim);

    // Writes the batch's new keys and values into their cache slots.
    // k, v [n_rows][n_kv_heads][head_dim]; slots [n_rows]: block_id * block_size + offset, or -1 to skip.
    void (*kv_append)(float* k_cache, float* v_cache, const float* k, const float* v, const int64_t* slots,
                      int n_rows, int n_kv_heads, int head_dim, int block_size);

    // As kv_append into an fp16 cache (KvDtype::f16): each value rounded to nearest, ties to even
    // (kernels/f16.h's f32_to_f16; beyond 65504 it becomes inf). Caches [num_blocks][n_kv_heads]
    // [block_size][head_dim] of fp16 bits.
    void (*kv_append_f16)(uint16_t* k_cache, uint16_t* v_cache, const float* k, const float* v,
                          const int64_t* slots, int n_rows, int n_kv_heads, int head_dim, int block_size);

    // Reads k_cache / v_cache as args.kv_dtype says.
    void (*paged_attention)(const PagedAttentionArgs& args);

    // Every pair's block, K and V, of one layer's cache copied in one call: bytes [src * block_bytes,
    // (src + 1) * block_bytes) onto the same range at dst, block_bytes = block_elems * elem_bytes (4 for
    // fp32, 2 for fp16). Sources are read as they were before the call: no pair's dst may be another's src.
    void (*copy_blocks)(void* k_cache, void* v_cache, const BlockCopy* pairs, int n_pairs, int64_t block_elems,
                        int elem_bytes);

    // SwiGLU: out[i] = silu(gate[i]) * up[i], silu(x) = x / (1 + exp(-x)). out may alias gate or up.
    void (*swiglu)(float* out, const float* gate, const float* up, int64_t n);

    // GELU in the tanh form of GPT-2 (and ONNX Runtime's FastGelu):
    //   out[i] = 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).  out may alias x.
    void (*gelu_tanh)(float* out, const float* x, int64_t n);

    // GeGLU in GELU's tanh form (Gemma): out[i] = gelu_tanh(gate[i]) * up[i]. out may alias gate or up.
    void (*geglu_tanh)(float* out, const float* gate, const float* up, int64_t n);

    // GELU, exact form (GPT-NeoX's "gelu"): out[i] = 0.5 x (1 + erf(x / sqrt(2))). out may alias x.
    void (*gelu_erf)(float* out, const float* x, int64_t n);

    // Soft-cap (Gemma 2's final logits): x[i] = cap * tanh(x[i] / cap), cap > 0.
    void (*softcap)(float* x, int64_t n, float cap);

    // Clamp (OLMo's clip_qkv on q, k and v): x[i] = min(max(x[i], -c), c), c > 0. A NaN stays NaN, as torch's
    // clamp keeps it. Exact: every output is an input or +-c.
    void (*clamp)(float* x, int64_t n, float c);

    // Scale (Granite's residual and logit multipliers): x[i] *= s, one fp32 product per element.
    void (*scale)(float* x, int64_t n, float s);

    // Residual add: x[i] += y[i].
    void (*add)(float* x, const float* y, int64_t n);

    // Bias of a linear layer: x[i][j] += bias[j], for i < n rows of width d.
    void (*add_bias)(float* x, const float* bias, int n, int d);
};

// The plain fp32 implementation: simple loops accumulating in double, never optimised, kept forever as
// the oracle.
const KernelTable& reference_kernels();

}  // namespace kvx
