// Norms, rotary embedding, activations, residual and bias adds, embedding lookups and the fp16 rounding of
// activations: the kernels of a forward pass that touch each element a few times, bound by memory traffic.
//
// Items. Every kernel here moves "items": a float4 (4 consecutive elements, 16-byte loads and stores) where
// the size divides by 4 and every pointer involved is 16-byte aligned (8-byte for fp16 data), else one
// element. The launch function picks the form; the scalar form exists for awkward widths and offsets.
//
// Thread mapping
//   rmsnorm, layernorm, add_rmsnorm, add_layernorm
//       One block per row (gridDim.x = n), blockDim = the row's items rounded up to whole warps (32 .. 1024).
//       Thread t owns items t, t + blockDim, ... of its row in every pass, so it only ever re-reads elements it
//       wrote itself (the fused residual add: x += y in pass 1, the sums read the updated x).
//         pass 1   [x += y and stored,] sum of x (layernorm) or of x^2 (rmsnorm), block_sum
//         pass 2   layernorm only: sum of (x - mean)^2 over the row re-read, block_sum (the biased variance
//                  as the reference defines it, free of the cancellation of E[x^2] - mean^2)
//         pass 3   out = normalised x * weight (+ bias), the row re-read
//       A row is at most a few tens of KiB, so the re-reads hit L1/L2: DRAM sees x and y read once, x and out
//       written once. Sums are fp32 (per-thread partials, then warp shuffles, then one warp over the warps).
//   rope_tables, rope, swiglu, geglu_tanh, gelu_tanh, gelu_erf, softcap, clamp, scale, add, add_bias, f32_to_f16
//       Grid-stride loops over items (grid_stride_blocks x 256 threads); the scalar tail of a vectorised
//       array (its last n % 4 elements) is a second loop of the same kernel.
//   embed, gather_rows
//       One block per row, its threads over the row's items.
//
// Shared memory: the norms' partials [kBlockSumSlots] floats (one per warp and the broadcast total), reused
// by both of layernorm's reductions. Nothing else here uses shared memory.
//
// Arithmetic: fp32 with expf / erfcf / tanhf / sqrtf / sincosf (never the __expf intrinsics), which keeps every
// result within the tests' 1e-5 of the double-precision reference; silu and the tanh GELU take the
// overflow-free forms of the CPU kernels (cpu/kernels/elementwise.inc), and the erf GELU is 0.5 x erfc(-x / sqrt 2),
// so that very negative inputs keep their tiny outputs as the reference does.
#include <cstdint>
#include <initializer_list>

#include "cuda/kernels/cuda_check.h"
#include "cuda/kernels/cuda_kernels.h"
#include "cuda/kernels/device_reduce.cuh"
#include "cuda/kernels/device_vector.cuh"
#include "cuda/kernels/launch_shape.h"

namespace kvx::cuda {
namespace {

constexpr int kThreads = 256;             // grid-stride kernels
constexpr int kMaxNormThreads = 1024;     // one row of a norm
constexpr int kMaxRowCopyThreads = 256;   // one row of embed / gather_rows

bool all_aligned(uintptr_t bytes, std::initializer_list<const void*> pointers) {
    for (const void* p : pointers)
        if (!is_aligned(p, bytes)) return false;
    return true;
}

// Grid-stride loops: this thread's first index and the whole grid's thread count.
__device__ __forceinline__ int64_t grid_thread() { return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t grid_threads() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// A grid-stride walk over n elements: groups of 4 (vector(i), i the group's first element) while vectorised, then
// the elements after the last whole group one at a time (scalar(i)).
template <class Vector, class Scalar>
__device__ __forceinline__ void for_fours_then_ones(int64_t n, bool vectorised, Vector vector, Scalar scalar) {
    const int64_t vector_end = vectorised ? n / 4 * 4 : 0;
    for (int64_t i = 4 * grid_thread(); i < vector_end; i += 4 * grid_threads()) vector(i);
    for (int64_t i = vector_end + grid_thread(); i < n; i += grid_threads()) scalar(i);
}

// ---- Norms ----

// out [n][d] = norm(x [n][d]); when y is not null, first x += y (x_sum, x's own memory, gets the sum).
// layer: LayerNorm with bias, else RMSNorm (bias unused).
template <int kVec>
__global__ void __launch_bounds__(kMaxNormThreads)
    norm_rows_kernel(float* out, const float* x, const float* y, float* x_sum, const float* weight, const float* bias,
                     int d, float eps, bool layer) {
    __shared__ float partials[kBlockSumSlots];
    const int64_t row_offset = static_cast<int64_t>(blockIdx.x) * d;
    const float* xr = x + row_offset;
    const int items = d / kVec;
    const float width = static_cast<float>(d);

    float sum = 0.0f;
    for (int i = static_cast<int>(threadIdx.x); i < items; i += static_cast<int>(blockDim.x)) {
        float v[kVec];
        load_floats<kVec>(xr + i * kVec, v);
        if (y) {
            float a[kVec];
            load_floats<kVec>(y + row_offset + i * kVec, a);
#pragma unroll
            for (int e = 0; e < kVec; ++e) v[e] += a[e];
            store_floats<kVec>(x_sum + row_offset + i * kVec, v);
        }
#pragma unroll
        for (int e = 0; e < kVec; ++e) sum += layer ? v[e] : v[e] * v[e];
    }
    sum = block_sum(sum, partials);

    float mean = 0.0f;
    float inv_scale;  // 1 / rms or 1 / standard deviation
    if (layer) {
        mean = sum / width;
        float squares = 0.0f;
        for (int i = static_cast<int>(threadIdx.x); i < items; i += static_cast<int>(blockDim.x)) {
            float v[kVec];
            load_floats<kVec>(xr + i * kVec, v);
#pragma unroll
            for (int e = 0; e < kVec; ++e) squares += (v[e] - mean) * (v[e] - mean);
        }
        squares = block_sum(squares, partials);
        inv_scale = 1.0f / sqrtf(squares / width + eps);
    } else {
        inv_scale = 1.0f / sqrtf(sum / width + eps);
    }

    for (int i = static_cast<int>(threadIdx.x); i < items; i += static_cast<int>(blockDim.x)) {
        float v[kVec], w[kVec];
        load_floats<kVec>(xr + i * kVec, v);
        load_floats<kVec>(weight + i * kVec, w);
        if (layer) {
            float b[kVec];
            load_floats<kVec>(bias + i * kVec, b);
#pragma unroll
            for (int e = 0; e < kVec; ++e) v[e] = (v[e] - mean) * inv_scale * w[e] + b[e];
        } else {
#pragma unroll
            for (int e = 0; e < kVec; ++e) v[e] = v[e] * inv_scale * w[e];
        }
        store_floats<kVec>(out + row_offset + i * kVec, v);
    }
}

void launch_norm(const char* name, float* out, const float* x, const float* y, float* x_sum, const float* weight,
                 const float* bias, int n, int d, float eps, bool layer, cudaStream_t stream) {
    require(n >= 0 && d >= 0, name, "negative row count or width");
    if (n == 0 || d == 0) return;
    const bool vec = d % 4 == 0 && all_aligned(16, {out, x, y, x_sum, weight, bias});
    const int threads = row_block_threads(vec ? d / 4 : d, kMaxNormThreads);
    if (vec)
        norm_rows_kernel<4><<<static_cast<unsigned>(n), threads, 0, stream>>>(out, x, y, x_sum, weight, bias, d, eps, layer);
    else
        norm_rows_kernel<1><<<static_cast<unsigned>(n), threads, 0, stream>>>(out, x, y, x_sum, weight, bias, d, eps, layer);
    check_launch(name);
}

// ---- Rotary embedding ----

__global__ void rope_tables_kernel(float* cos, float* sin, const int32_t* positions, const float* inv_freq, int half,
                                   int64_t total) {
    for (int64_t idx = grid_thread(); idx < total; idx += grid_threads()) {
        const int64_t r = idx / half;
        const int i = static_cast<int>(idx - r * half);
        const float angle = static_cast<float>(positions[r]) * inv_freq[i];  // fp32 product, as the host's
        sincosf(angle, &sin[idx], &cos[idx]);
    }
}

// One item = kVec consecutive pairs (j, j + half) of one head, half = rotary_dim / 2; items
// [n_rows][n_heads][half / kVec]. Elements rotary_dim .. head_dim of each head (partial rotary) are not touched.
template <int kVec>
__global__ void rope_kernel(float* x, const float* cos, const float* sin, int n_heads, int head_dim, int rotary_dim,
                            int64_t total) {
    const int half = rotary_dim / 2;
    const int per_head = half / kVec;
    for (int64_t idx = grid_thread(); idx < total; idx += grid_threads()) {
        const int64_t row_head = idx / per_head;  // r * n_heads + h
        const int j = static_cast<int>(idx - row_head * per_head) * kVec;
        const int64_t table = row_head / n_heads * half + j;
        float* first = x + row_head * head_dim + j;
        float x1[kVec], x2[kVec], c[kVec], s[kVec];
        load_floats<kVec>(first, x1);
        load_floats<kVec>(first + half, x2);
        load_floats<kVec>(cos + table, c);
        load_floats<kVec>(sin + table, s);
        float r1[kVec], r2[kVec];
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
            r1[e] = x1[e] * c[e] - x2[e] * s[e];
            r2[e] = x2[e] * c[e] + x1[e] * s[e];
        }
        store_floats<kVec>(first, r1);
        store_floats<kVec>(first + half, r2);
    }
}

// ---- Element-wise maps: out[i] = op(a[i], b[i]) ----

// silu(g) * u with t = e^-|g| in (0, 1], so exp never overflows: sigmoid(g) = 1 / (1 + t) for g >= 0, t / (1 + t)
// below.
struct SwigluOp {
    static constexpr bool kBinary = true;
    __device__ float operator()(float g, float u) const {
        const float t = expf(-fabsf(g));
        return g * (g >= 0.0f ? 1.0f : t) / (1.0f + t) * u;
    }
};

// 0.5 x (1 + tanh(v)), v = sqrt(2/pi) (x + 0.044715 x^3), as x * (1 + tanh(v)) / 2 with t = e^(-2|v|):
// 1 + tanh(v) = 2 / (1 + t) for v >= 0 and 2 t / (1 + t) below. Unlike 1 + tanhf(v), which cancels to 0 for
// v < -9 or so, this keeps the tiny negative outputs the reference computes.
struct GeluTanhOp {
    static constexpr bool kBinary = false;
    __device__ float operator()(float x, float) const {
        const float v = 0.7978845608028654f * (x + 0.044715f * x * x * x);
        const float t = expf(-2.0f * fabsf(v));
        return x * (v >= 0.0f ? 1.0f : t) / (1.0f + t);
    }
};

// GeGLU (Gemma): gelu_tanh(g) * u, GeluTanhOp's form times u.
struct GegluTanhOp {
    static constexpr bool kBinary = true;
    __device__ float operator()(float g, float u) const { return GeluTanhOp{}(g, 0.0f) * u; }
};

// The exact GELU (GPT-NeoX's "gelu"): 0.5 x (1 + erf(x / sqrt 2)) = 0.5 x erfc(-x / sqrt 2). erfc keeps the
// small outputs of very negative x, where 1 + erff(...) cancels to a few ulps of 1 or to 0.
struct GeluErfOp {
    static constexpr bool kBinary = false;
    __device__ float operator()(float x, float) const { return 0.5f * x * erfcf(-x * 0.70710678118654752f); }
};

// Soft-cap (Gemma 2's final logits): cap * tanh(x / cap).
struct SoftcapOp {
    static constexpr bool kBinary = false;
    float cap;
    __device__ float operator()(float x, float) const { return cap * tanhf(x / cap); }
};

// Clamp (OLMo's clip_qkv): fminf / fmaxf would turn a NaN into the bound; the comparisons keep it, as the
// reference's do.
struct ClampOp {
    static constexpr bool kBinary = false;
    float c;
    __device__ float operator()(float x, float) const {
        if (x < -c) return -c;
        return x > c ? c : x;
    }
};

// Scale (Granite's multipliers): one fp32 product, as the host's.
struct ScaleOp {
    static constexpr bool kBinary = false;
    float s;
    __device__ float operator()(float x, float) const { return x * s; }
};

struct AddOp {
    static constexpr bool kBinary = true;
    __device__ float operator()(float a, float b) const { return a + b; }
};

// out may alias a or b: each element is read before its one store, by the same thread.
template <class Op>
__global__ void map_kernel(float* out, const float* a, const float* b, int64_t n, bool vectorised, Op op) {
    auto four = [&](int64_t i) {
        float va[4], vb[4] = {};
        load_floats<4>(a + i, va);
        if constexpr (Op::kBinary) load_floats<4>(b + i, vb);
#pragma unroll
        for (int e = 0; e < 4; ++e) va[e] = op(va[e], vb[e]);
        store_floats<4>(out + i, va);
    };
    auto one = [&](int64_t i) { out[i] = op(a[i], Op::kBinary ? b[i] : 0.0f); };
    for_fours_then_ones(n, vectorised, four, one);
}

template <class Op>
void launch_map(const char* name, float* out, const float* a, const float* b, int64_t n, cudaStream_t stream,
                Op op = {}) {
    require(n >= 0, name, "negative element count");
    if (n == 0) return;
    const bool vectorised = all_aligned(16, {out, a, b});
    const int64_t items = vectorised ? n / 4 + n % 4 : n;
    map_kernel<<<grid_stride_blocks(items, kThreads), kThreads, 0, stream>>>(out, a, b, n, vectorised, op);
    check_launch(name);
}

// x [n][d] += bias [d]; one item = kVec consecutive elements of a row (d % kVec == 0).
template <int kVec>
__global__ void add_bias_kernel(float* x, const float* bias, int d, int64_t total) {
    for (int64_t idx = grid_thread(); idx < total; idx += grid_threads()) {
        const int64_t at = idx * kVec;
        float v[kVec], b[kVec];
        load_floats<kVec>(x + at, v);
        load_floats<kVec>(bias + at % d, b);
#pragma unroll
        for (int e = 0; e < kVec; ++e) v[e] += b[e];
        store_floats<kVec>(x + at, v);
    }
}

__global__ void f32_to_f16_kernel(uint16_t* out, const float* x, int64_t n, bool vectorised) {
    auto four = [&](int64_t i) {
        float v[4];
        load_floats<4>(x + i, v);
        store_floats_as_f16<4>(out + i, v);
    };
    auto one = [&](int64_t i) { out[i] = f32_to_f16_bits(x[i]); };
    for_fours_then_ones(n, vectorised, four, one);
}

// ---- Row lookups ----

template <int kVec>
__device__ __forceinline__ void load_table_item(const void* table, bool f16, int64_t at, float (&v)[kVec]) {
    if (f16)
        load_f16_as_floats<kVec>(static_cast<const uint16_t*>(table) + at, v);
    else
        load_floats<kVec>(static_cast<const float*>(table) + at, v);
}

// Block r: x[r] = table[tokens[r]] * scale (+ pos_table[positions[r]]), items of kVec elements.
template <int kVec>
__global__ void embed_kernel(float* x, const int32_t* tokens, const void* table, bool table_f16, float scale,
                             const void* pos_table, bool pos_f16, const int32_t* positions, int dim) {
    const int64_t r = blockIdx.x;
    const int64_t token_row = static_cast<int64_t>(tokens[r]) * dim;
    const int64_t pos_row = pos_table ? static_cast<int64_t>(positions[r]) * dim : 0;
    for (int i = static_cast<int>(threadIdx.x) * kVec; i < dim; i += static_cast<int>(blockDim.x) * kVec) {
        float v[kVec];
        load_table_item<kVec>(table, table_f16, token_row + i, v);
        if (scale != 1.0f) {
#pragma unroll
            for (int e = 0; e < kVec; ++e) v[e] *= scale;  // the host's one fp32 product
        }
        if (pos_table) {
            float p[kVec];
            load_table_item<kVec>(pos_table, pos_f16, pos_row + i, p);
#pragma unroll
            for (int e = 0; e < kVec; ++e) v[e] += p[e];  // the host's kernels.add: one fp32 add
        }
        store_floats<kVec>(x + r * dim + i, v);
    }
}

template <int kVec>
__global__ void gather_rows_kernel(float* out, const float* x, const int32_t* rows, int d) {
    const int64_t i = blockIdx.x;
    const float* src = x + static_cast<int64_t>(rows[i]) * d;
    for (int j = static_cast<int>(threadIdx.x) * kVec; j < d; j += static_cast<int>(blockDim.x) * kVec) {
        float v[kVec];
        load_floats<kVec>(src + j, v);
        store_floats<kVec>(out + i * d + j, v);
    }
}

}  // namespace

void rmsnorm(float* out, const float* x, const float* weight, int n, int d, float eps, cudaStream_t stream) {
    launch_norm("rmsnorm", out, x, nullptr, nullptr, weight, nullptr, n, d, eps, false, stream);
}

void layernorm(float* out, const float* x, const float* weight, const float* bias, int n, int d, float eps,
               cudaStream_t stream) {
    launch_norm("layernorm", out, x, nullptr, nullptr, weight, bias, n, d, eps, true, stream);
}

void add_rmsnorm(float* out, float* x, const float* y, const float* weight, int n, int d, float eps, cudaStream_t stream) {
    launch_norm("add_rmsnorm", out, x, y, x, weight, nullptr, n, d, eps, false, stream);
}

void add_layernorm(float* out, float* x, const float* y, const float* weight, const float* bias, int n, int d,
                   float eps, cudaStream_t stream) {
    launch_norm("add_layernorm", out, x, y, x, weight, bias, n, d, eps, true, stream);
}

void rope_tables(float* cos, float* sin, const int32_t* positions, const float* inv_freq, int n_rows, int half,
                 cudaStream_t stream) {
    require(n_rows >= 0 && half >= 0, "rope_tables", "negative row count or table width");
    const int64_t total = int64_t{n_rows} * half;
    if (total == 0) return;
    rope_tables_kernel<<<grid_stride_blocks(total, kThreads), kThreads, 0, stream>>>(cos, sin, positions, inv_freq,
                                                                                     half, total);
    check_launch("rope_tables");
}

void rope(float* x, const float* cos, const float* sin, int n_rows, int n_heads, int head_dim, int rotary_dim,
          cudaStream_t stream) {
    require(n_rows >= 0 && n_heads >= 0 && head_dim >= 0, "rope", "negative row count, head count or head_dim");
    // As the reference: half = rotary_dim / 2 pairs (an odd last element, as of an odd head_dim, passes through).
    require(rotary_dim >= 0 && rotary_dim <= head_dim, "rope", "rotary_dim must be 0..head_dim");
    const int half = rotary_dim / 2;
    const int64_t pairs = int64_t{n_rows} * n_heads * half;
    if (pairs == 0) return;
    // Vectorised: whole float4s of pairs, and every head (stride head_dim) and table row (stride half) starting
    // 16-byte aligned.
    if (half % 4 == 0 && head_dim % 4 == 0 && all_aligned(16, {x, cos, sin})) {
        rope_kernel<4><<<grid_stride_blocks(pairs / 4, kThreads), kThreads, 0, stream>>>(x, cos, sin, n_heads, head_dim,
                                                                                         rotary_dim, pairs / 4);
    } else {
        rope_kernel<1><<<grid_stride_blocks(pairs, kThreads), kThreads, 0, stream>>>(x, cos, sin, n_heads, head_dim,
                                                                                     rotary_dim, pairs);
    }
    check_launch("rope");
}

void swiglu(float* out, const float* gate, const float* up, int64_t n, cudaStream_t stream) {
    launch_map<SwigluOp>("swiglu", out, gate, up, n, stream);
}

void gelu_tanh(float* out, const float* x, int64_t n, cudaStream_t stream) {
    launch_map<GeluTanhOp>("gelu_tanh", out, x, nullptr, n, stream);
}

void geglu_tanh(float* out, const float* gate, const float* up, int64_t n, cudaStream_t stream) {
    launch_map<GegluTanhOp>("geglu_tanh", out, gate, up, n, stream);
}

void gelu_erf(float* out, const float* x, int64_t n, cudaStream_t stream) {
    launch_map<GeluErfOp>("gelu_erf", out, x, nullptr, n, stream);
}

void softcap(float* x, int64_t n, float cap, cudaStream_t stream) {
    require(cap > 0.0f, "softcap", "the cap must be positive");
    launch_map<SoftcapOp>("softcap", x, x, nullptr, n, stream, SoftcapOp{cap});
}

void clamp(float* x, int64_t n, float c, cudaStream_t stream) {
    require(c > 0.0f, "clamp", "the bound must be positive");
    launch_map<ClampOp>("clamp", x, x, nullptr, n, stream, ClampOp{c});
}

void scale(float* x, int64_t n, float s, cudaStream_t stream) {
    launch_map<ScaleOp>("scale", x, x, nullptr, n, stream, ScaleOp{s});
}

void add(float* x, const float* y, int64_t n, cudaStream_t stream) { launch_map<AddOp>("add", x, x, y, n, stream); }

void add_bias(float* x, const float* bias, int n, int d, cudaStream_t stream) {
    require(n >= 0 && d >= 0, "add_bias", "negative row count or width");
    const int64_t total = int64_t{n} * d;
    if (total == 0) return;
    if (d % 4 == 0 && all_aligned(16, {x, bias}))
        add_bias_kernel<4><<<grid_stride_blocks(total / 4, kThreads), kThreads, 0, stream>>>(x, bias, d, total / 4);
    else
        add_bias_kernel<1><<<grid_stride_blocks(total, kThreads), kThreads, 0, stream>>>(x, bias, d, total);
    check_launch("add_bias");
}

void embed(float* x, const int32_t* tokens, const void* table, bool table_f16, float scale, const void* pos_table,
           bool pos_f16, const int32_t* positions, int n_rows, int dim, cudaStream_t stream) {
    require(n_rows >= 0 && dim >= 0, "embed", "negative row count or width");
    if (n_rows == 0 || dim == 0) return;
    const bool vec = dim % 4 == 0 && is_aligned(x, 16) && is_aligned(table, table_f16 ? 8 : 16) &&
                     is_aligned(pos_table, pos_f16 ? 8 : 16);
    const int threads = row_block_threads(vec ? dim / 4 : dim, kMaxRowCopyThreads);
    if (vec)
        embed_kernel<4><<<static_cast<unsigned>(n_rows), threads, 0, stream>>>(x, tokens, table, table_f16, scale,
                                                                               pos_table, pos_f16, positions, dim);
    else
        embed_kernel<1><<<static_cast<unsigned>(n_rows), threads, 0, stream>>>(x, tokens, table, table_f16, scale,
                                                                               pos_table, pos_f16, positions, dim);
    check_launch("embed");
}

void gather_rows(float* out, const float* x, const int32_t* rows, int n, int d, cudaStream_t stream) {
    require(n >= 0 && d >= 0, "gather_rows", "negative row count or width");
    if (n == 0 || d == 0) return;
    const bool vec = d % 4 == 0 && all_aligned(16, {out, x});
    const int threads = row_block_threads(vec ? d / 4 : d, kMaxRowCopyThreads);
    if (vec)
        gather_rows_kernel<4><<<static_cast<unsigned>(n), threads, 0, stream>>>(out, x, rows, d);
    else
        gather_rows_kernel<1><<<static_cast<unsigned>(n), threads, 0, stream>>>(out, x, rows, d);
    check_launch("gather_rows");
}

void f32_to_f16(uint16_t* out, const float* x, int64_t n, cudaStream_t stream) {
    require(n >= 0, "f32_to_f16", "negative element count");
    if (n == 0) return;
    const bool vectorised = is_aligned(out, 8) && is_aligned(x, 16);
    const int64_t items = vectorised ? n / 4 + n % 4 : n;
    f32_to_f16_kernel<<<grid_stride_blocks(items, kThreads), kThreads, 0, stream>>>(out, x, n, vectorised);
    check_launch("f32_to_f16");
}

}  // namespace kvx::cuda
