// Attention over the KV cache on the device: cuda_kernels.h's paged_attention and contiguous_attention, one
// kernel templated on the cache layout (PagedCache<float>, PagedCache<uint16_t>, ContiguousCache), plus the
// pass that merges partitions.
//
// Thread mapping
//   grid   (n_tiles, n_kv_heads, n_partitions). Tiles go on x (limit 2^31 - 1): a long prefill cut into tiles
//          of 16 / group_size rows can exceed the 65535 of y and z.
//   block  kThreads = 128 threads = 4 warps. The tile's query vectors qi = row_in_tile * tile.n_heads +
//          head_in_tile (at most kTileQueries = 16) are dealt round robin: warp w owns qi = w, w + 4, w + 8,
//          w + 12 (its "slots"), so that a decode row's GQA group of 4 keeps all four warps busy.
//   keys   the partition's keys are walked in chunks of kKeyChunk = 32. All 128 threads stage a chunk's K and
//          V in shared memory as fp32 (coalesced 16-byte loads where head_dim and the cache's alignment allow,
//          scalar loads otherwise); then lane j scores key j against its warp's query vectors, the warp
//          updates each query's online softmax (running max m, running sum l) with shuffles, and lane L
//          accumulates output dims L, L + 32, ... (at most kMaxHeadDim / 32 = 8 per lane, in registers) with
//          the chunk's probabilities broadcast by __shfl_sync. With a logit soft-cap (Gemma 2) each scaled score
//          s becomes softcap * tanhf(s / softcap) before it enters the softmax, as the reference does.
//
// Why: a decode step's attention is bound by reading the cache. A tile's query vectors (a GQA group, the rows
// of a prefill chunk) share every key and value it stages, so each K/V element is read from global memory
// once per tile; partitions (flash-decoding) give a few long sequences enough blocks to fill the GPU. The
// arithmetic is plain fp32 FMAs with expf, which keeps results within 1e-5 of the fp64 reference.
//
// Shared memory, one block (dynamic; attention_smem_bytes):
//   key_offset [kKeyChunk]                int64: element offset of each staged key's row in k and v; -1 when
//                                         the key lies outside the partition (its K and V are staged as zeros)
//   q_s        [kTileQueries][head_dim]   the tile's query vectors, rows qi
//   v_s        [kKeyChunk][head_dim]      values; lane L reads dim L of one key: consecutive words, no conflict
//   k_s        [kKeyChunk][head_dim | 1]  keys; lane j walks row j, and the odd row stride puts the 32 rows'
//                                         same dim in 32 different banks
// For head_dim 256 that is 82 KB, above the default 48 KB: the launch raises the block's limit.
//
// Key ranges: a tile covers keys [range_begin, range_end] = [min over its rows of first, max of row_pos], first =
// max(0, pos - window + 1) with a window, 0 without. Every key in it is in the cache (kernels.h: only blocks
// before every row's window may be released), but each query masks the keys outside its own [first, pos].
// Partition p covers range_begin + p * partition_tokens .. + partition_tokens - 1, clipped to the range; the
// last partition runs to range_end whatever the plan said, so a plan made for a shorter span is slower, never
// wrong. A partition past the range writes the empty state (m = -inf, l = 0, acc = 0).
//
// Workspace (n_partitions > 1), written by the attention kernel and read by the merge:
//   acc [n_rows][n_heads][n_partitions][head_dim]   unnormalised sums of p_j * v_j
//   ml  [n_rows][n_heads][n_partitions][2]          the running max m and sum l of the same state
// attention_workspace_floats (cuda/kernels/attention_plan.cpp) returns their total size.
#include <cuda_fp16.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <string>

#include "cuda/kernels/cuda_check.h"
#include "cuda/kernels/cuda_kernels.h"
#include "kernels/error.h"

namespace kvx::cuda {

namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kSlots = kTileQueries / kWarps;  // query vectors per warp
constexpr int kMaxSlices = kMaxHeadDim / 32;   // output dims per lane
constexpr unsigned kFullMask = 0xffffffffu;
constexpr size_t kDefaultSmemLimit = 48 * 1024;
static_assert(kKeyChunk == 32, "one key per lane");
static_assert(kTileQueries % kWarps == 0, "every warp owns the same number of slots");

// ---- Cache layouts: where position `pos` of sequence `seq` lives for KV head `kv_head` ----

// kernels.h's paged cache [num_blocks][n_kv_heads][block_size][head_dim] of T (float, or uint16_t fp16 bits).
template <class T>
struct PagedCache {
    using Elem = T;
    const T* k;
    const T* v;
    const int32_t* block_tables;  // [n_seqs][table_stride]
    int table_stride;
    int block_size;
    int n_kv_heads;
    int head_dim;

    __device__ int64_t row_offset(int seq, int kv_head, int pos) const {
        const int64_t block = block_tables[int64_t{seq} * table_stride + pos / block_size];
        return ((block * n_kv_heads + kv_head) * block_size + pos % block_size) * head_dim;
    }
};

// ContiguousAttentionArgs' cache [n_seqs][n_kv_heads][max_seq][head_dim] of float.
struct ContiguousCache {
    using Elem = float;
    const float* k;
    const float* v;
    int max_seq;
    int n_kv_heads;
    int head_dim;

    __device__ int64_t row_offset(int seq, int kv_head, int pos) const {
        return ((int64_t{seq} * n_kv_heads + kv_head) * max_seq + pos) * head_dim;
    }
};

// What a launch needs besides the cache; the same for both layouts.
struct AttentionLaunch {
    const float* q;                // [n_rows][n_heads][head_dim]
    const int32_t* row_seq;        // [n_rows]
    const int32_t* row_pos;        // [n_rows]
    const AttentionTile* tiles;    // [n_tiles]
    float* out;                    // [n_rows][n_heads][head_dim]
    float* workspace;              // acc then ml (see the top of the file); null with one partition
    int64_t ml_offset;             // floats before ml in workspace
    int n_rows;
    int n_heads;
    int n_kv_heads;
    int head_dim;
    int window;
    float scale;
    float softcap;                 // attention logit soft-cap; 0: none (the contiguous baseline has none)
    int n_partitions;
    int partition_tokens;
    bool vector_loads;             // 16-byte loads: head_dim a multiple of 16 bytes' elements, caches aligned
};

// ---- Loads ----

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(uint16_t bits) { return __half2float(__ushort_as_half(bits)); }

// The 16 bytes at p (16-byte aligned) as fp32: 4 floats, or 8 fp16 values widened exactly.
__device__ __forceinline__ void load16(const float* p, float (&out)[4]) {
    const float4 x = __ldg(reinterpret_cast<const float4*>(p));
    out[0] = x.x;
    out[1] = x.y;
    out[2] = x.z;
    out[3] = x.w;
}
__device__ __forceinline__ void load16(const uint16_t* p, float (&out)[8]) {
    const uint4 x = __ldg(reinterpret_cast<const uint4*>(p));
    const unsigned words[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
    for (int c = 0; c < 4; ++c) {
        out[2 * c] = to_float(static_cast<uint16_t>(words[c] & 0xffffu));  // little endian: low half first
        out[2 * c + 1] = to_float(static_cast<uint16_t>(words[c] >> 16));
    }
}

// Stages the keys and values key_offset names into k_s / v_s (zeros where the offset is -1).
template <class T>
__device__ __forceinline__ void stage_chunk(const T* __restrict__ k, const T* __restrict__ v,
                                            const int64_t* key_offset, float* k_s, float* v_s, int head_dim,
                                            bool vector_loads) {
    const int k_stride = head_dim | 1;
    if (vector_loads) {
        constexpr int kWidth = 16 / sizeof(T);
        const int per_row = head_dim / kWidth;
#pragma unroll 2
        for (int i = threadIdx.x; i < kKeyChunk * per_row; i += kThreads) {
            const int j = i / per_row;
            const int d = (i - j * per_row) * kWidth;
            const int64_t offset = key_offset[j];
            float kx[kWidth], vx[kWidth];
            if (offset >= 0) {
                load16(k + offset + d, kx);
                load16(v + offset + d, vx);
            } else {
#pragma unroll
                for (int c = 0; c < kWidth; ++c) kx[c] = vx[c] = 0.0f;
            }
            // k_s's odd stride breaks 16-byte alignment; v_s's rows keep it (head_dim % 4 == 0 here).
#pragma unroll
            for (int c = 0; c < kWidth; ++c) k_s[j * k_stride + d + c] = kx[c];
            float4* v_dst = reinterpret_cast<float4*>(v_s + j * head_dim + d);
#pragma unroll
            for (int c = 0; c < kWidth / 4; ++c) v_dst[c] = make_float4(vx[4 * c], vx[4 * c + 1], vx[4 * c + 2], vx[4 * c + 3]);
        }
    } else {
#pragma unroll 4
        for (int i = threadIdx.x; i < kKeyChunk * head_dim; i += kThreads) {
            const int j = i / head_dim;
            const int d = i - j * head_dim;
            const int64_t offset = key_offset[j];
            k_s[j * k_stride + d] = offset >= 0 ? to_float(k[offset + d]) : 0.0f;
            v_s[j * head_dim + d] = offset >= 0 ? to_float(v[offset + d]) : 0.0f;
        }
    }
}

// ---- Online softmax of one warp's query vectors ----

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
    for (int step = 16; step > 0; step /= 2) x = fmaxf(x, __shfl_xor_sync(kFullMask, x, step));
    return x;
}
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int step = 16; step > 0; step /= 2) x += __shfl_xor_sync(kFullMask, x, step);
    return x;
}

// The softmax states of the query vectors a warp owns. m and l are the same in every lane; lane L holds
// dims L + 32 k of acc.
struct WarpQueries {
    int n_slots;              // slots in use, 0 .. kSlots (the same in every lane)
    int lo[kSlots];           // keys lo .. hi of this partition are visible to the slot's query
    int hi[kSlots];
    float m[kSlots];          // running max of the scaled scores, -inf before any visible key
    float l[kSlots];          // running sum of exp(score - m)
    float acc[kSlots][kMaxSlices];  // running sum of exp(score - m) * v, dims lane + 32 k
};

// Folds the staged chunk of keys chunk .. chunk + 31 into the warp's states. All 32 lanes take part.
__device__ __forceinline__ void attend_chunk(WarpQueries& w, const float* q_s, const float* k_s, const float* v_s,
                                             int head_dim, int chunk, float scale, float softcap) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float score[kSlots];
#pragma unroll
    for (int i = 0; i < kSlots; ++i) score[i] = 0.0f;
    const float* k_row = k_s + lane * (head_dim | 1);
#pragma unroll 4
    for (int d = 0; d < head_dim; ++d) {
        const float kd = k_row[d];
#pragma unroll
        for (int i = 0; i < kSlots; ++i)
            if (i < w.n_slots) score[i] = fmaf(q_s[(warp + i * kWarps) * head_dim + d], kd, score[i]);
    }

    const int key = chunk + lane;
    float prob[kSlots];  // exp(score - m) of key `key` for each slot, 0 where masked
    if (softcap > 0.0f) {
#pragma unroll
        for (int i = 0; i < kSlots; ++i) score[i] = softcap * tanhf(score[i] * scale / softcap);
        scale = 1.0f;  // folded in above
    }
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
        prob[i] = 0.0f;
        if (i >= w.n_slots) continue;
        const float s = key >= w.lo[i] && key <= w.hi[i] ? score[i] * scale : -INFINITY;
        const float new_m = fmaxf(w.m[i], warp_max(s));
        if (new_m == -INFINITY) continue;  // nothing visible yet: exp(m - new_m) would be exp(-inf + inf) = NaN
        const float rescale = expf(w.m[i] - new_m);  // 0 on the first visible key (m = -inf)
        prob[i] = expf(s - new_m);                    // 0 for masked keys
        w.l[i] = w.l[i] * rescale + warp_sum(prob[i]);
        w.m[i] = new_m;
#pragma unroll
        for (int k = 0; k < kMaxSlices; ++k) w.acc[i][k] *= rescale;
    }

#pragma unroll 2
    for (int j = 0; j < kKeyChunk; ++j) {
        float pj[kSlots];
#pragma unroll
        for (int i = 0; i < kSlots; ++i) pj[i] = __shfl_sync(kFullMask, prob[i], j);
        const float* v_row = v_s + j * head_dim;
#pragma unroll
        for (int k = 0; k < kMaxSlices; ++k) {
            const int d = lane + 32 * k;
            if (d >= head_dim) continue;
            const float vd = v_row[d];
#pragma unroll
            for (int i = 0; i < kSlots; ++i)
                if (i < w.n_slots) w.acc[i][k] = fmaf(pj[i], vd, w.acc[i][k]);
        }
    }
}

__device__ __forceinline__ int first_visible(int pos, int window) { return window > 0 ? max(0, pos - window + 1) : 0; }

// ---- Kernels ----

template <class Cache>
__global__ void __launch_bounds__(kThreads) attention_kernel(const Cache cache, const AttentionLaunch a) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int head_dim = a.head_dim;
    int64_t* key_offset = reinterpret_cast<int64_t*>(smem);              // [kKeyChunk]
    float* q_s = reinterpret_cast<float*>(key_offset + kKeyChunk);       // [kTileQueries][head_dim]
    float* v_s = q_s + kTileQueries * head_dim;                          // [kKeyChunk][head_dim]
    float* k_s = v_s + kKeyChunk * head_dim;                             // [kKeyChunk][head_dim | 1]

    const AttentionTile tile = a.tiles[blockIdx.x];
    const int kv_head = static_cast<int>(blockIdx.y);
    const int partition = static_cast<int>(blockIdx.z);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int seq = a.row_seq[tile.row_begin];
    const int n_queries = tile.n_rows * tile.n_heads;
    const int head0 = kv_head * (a.n_heads / a.n_kv_heads) + tile.head_begin;  // query head of qi = 0
    // (row, head) of query vector qi, as one index into q and out's [n_rows][n_heads]
    auto row_head_of = [&](int qi) {
        return int64_t{tile.row_begin + qi / tile.n_heads} * a.n_heads + head0 + qi % tile.n_heads;
    };

    int range_begin = INT_MAX, range_end = INT_MIN;
    for (int r = 0; r < tile.n_rows; ++r) {
        const int pos = a.row_pos[tile.row_begin + r];
        range_begin = min(range_begin, first_visible(pos, a.window));
        range_end = max(range_end, pos);
    }
    int part_begin = range_begin, part_end = range_end;  // this block's keys; none when part_begin > part_end
    if (a.n_partitions > 1) {
        const int64_t begin = int64_t{range_begin} + int64_t{partition} * a.partition_tokens;
        part_begin = static_cast<int>(min(begin, int64_t{range_end} + 1));
        if (partition < a.n_partitions - 1)
            part_end = static_cast<int>(min(int64_t{range_end}, begin + a.partition_tokens - 1));
    }

    WarpQueries w;
    w.n_slots = max(0, (n_queries - warp + kWarps - 1) / kWarps);
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
        const int qi = warp + i * kWarps;
        w.lo[i] = 1;
        w.hi[i] = 0;
        if (qi < n_queries) {
            const int pos = a.row_pos[tile.row_begin + qi / tile.n_heads];
            w.lo[i] = max(first_visible(pos, a.window), part_begin);
            w.hi[i] = min(pos, part_end);
        }
        w.m[i] = -INFINITY;
        w.l[i] = 0.0f;
#pragma unroll
        for (int k = 0; k < kMaxSlices; ++k) w.acc[i][k] = 0.0f;
    }

    if (part_begin <= part_end) {
        for (int idx = threadIdx.x; idx < n_queries * head_dim; idx += kThreads) {
            const int qi = idx / head_dim;
            q_s[idx] = a.q[row_head_of(qi) * head_dim + (idx - qi * head_dim)];
        }
    }
    // Barriers: the first makes key_offset (and, once, q_s) visible and keeps the chunk's staging from
    // overwriting k_s / v_s while a warp still attends to the previous chunk; the second publishes the staged
    // chunk. key_offset is rewritten only after the second, when every thread has finished staging with it.
    for (int chunk = part_begin; chunk <= part_end; chunk += kKeyChunk) {
        if (threadIdx.x < kKeyChunk) {
            const int key = chunk + static_cast<int>(threadIdx.x);
            key_offset[threadIdx.x] = key <= part_end ? cache.row_offset(seq, kv_head, key) : -1;
        }
        __syncthreads();
        stage_chunk(cache.k, cache.v, key_offset, k_s, v_s, head_dim, a.vector_loads);
        __syncthreads();
        if (w.n_slots > 0) attend_chunk(w, q_s, k_s, v_s, head_dim, chunk, a.scale, a.softcap);
    }

#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
        if (i >= w.n_slots) continue;
        const int64_t row_head = row_head_of(warp + i * kWarps);
        if (a.n_partitions == 1) {
            // Every query sees at least its own position, so l > 0.
#pragma unroll
            for (int k = 0; k < kMaxSlices; ++k)
                if (lane + 32 * k < head_dim) a.out[row_head * head_dim + lane + 32 * k] = w.acc[i][k] / w.l[i];
        } else {
            const int64_t state = row_head * a.n_partitions + partition;
#pragma unroll
            for (int k = 0; k < kMaxSlices; ++k)
                if (lane + 32 * k < head_dim) a.workspace[state * head_dim + lane + 32 * k] = w.acc[i][k];
            if (lane == 0) {
                a.workspace[a.ml_offset + 2 * state] = w.m[i];
                a.workspace[a.ml_offset + 2 * state + 1] = w.l[i];
            }
        }
    }
}

// out[row_head][d] = sum_p acc_p[d] e^(m_p - M) / sum_p l_p e^(m_p - M), M = max m_p, over the partitions
// with l_p > 0 (an empty one contributes nothing). One block per (row, head), thread d for dim d.
__global__ void merge_partitions_kernel(float* out, const float* workspace, int64_t ml_offset, int head_dim,
                                        int n_partitions) {
    const int64_t row_head = blockIdx.x;
    const int d = static_cast<int>(threadIdx.x);
    const float* acc = workspace + row_head * n_partitions * head_dim;  // [n_partitions][head_dim]
    const float* ml = workspace + ml_offset + row_head * n_partitions * 2;  // [n_partitions][2]
    float max_m = -INFINITY;
    for (int p = 0; p < n_partitions; ++p)
        if (ml[2 * p + 1] > 0.0f) max_m = fmaxf(max_m, ml[2 * p]);
    float sum = 0.0f, weighted = 0.0f;
    for (int p = 0; p < n_partitions; ++p) {
        const float l = ml[2 * p + 1];
        if (!(l > 0.0f)) continue;
        const float weight = expf(ml[2 * p] - max_m);
        sum = fmaf(weight, l, sum);
        if (d < head_dim) weighted = fmaf(weight, acc[int64_t{p} * head_dim + d], weighted);
    }
    if (d < head_dim) out[row_head * head_dim + d] = weighted / sum;
}

// ---- Launches ----

size_t attention_smem_bytes(int head_dim) {
    const size_t floats = static_cast<size_t>(kTileQueries + kKeyChunk) * head_dim +
                          static_cast<size_t>(kKeyChunk) * static_cast<size_t>(head_dim | 1);
    return kKeyChunk * sizeof(int64_t) + floats * sizeof(float);
}

void require(bool ok, const char* kernel, const std::string& problem) {
    if (!ok) throw Error(std::string(kernel) + ": " + problem);
}

// Checks what both layouts share and fills everything but the cache. Args: PagedAttentionArgs or
// ContiguousAttentionArgs, whose shared fields have the same names.
template <class Args>
AttentionLaunch attention_launch(const char* kernel, const Args& args, const AttentionTile* tiles, int n_tiles,
                                 const AttentionPartitions& partitions, float* workspace) {
    const int n_rows = args.n_rows, n_heads = args.n_heads, n_kv_heads = args.n_kv_heads, head_dim = args.head_dim;
    require(head_dim >= 1 && head_dim <= kMaxHeadDim, kernel,
            "head_dim must be 1.." + std::to_string(kMaxHeadDim) + ", got " + std::to_string(head_dim));
    require(n_kv_heads >= 1 && n_heads >= 1 && n_heads % n_kv_heads == 0, kernel,
            "n_heads (" + std::to_string(n_heads) + ") must be a positive multiple of n_kv_heads (" +
                std::to_string(n_kv_heads) + ")");
    require(n_kv_heads <= 65535, kernel, "n_kv_heads " + std::to_string(n_kv_heads) + " exceeds the grid's 65535");
    require(partitions.n_partitions >= 1 && partitions.n_partitions <= 65535, kernel,
            "n_partitions must be 1..65535, got " + std::to_string(partitions.n_partitions));
    // One partition covers the whole key range, so its partition_tokens is never read.
    require(partitions.n_partitions == 1 ||
                (partitions.partition_tokens > 0 && partitions.partition_tokens % kKeyChunk == 0),
            kernel, "partition_tokens must be a positive multiple of " + std::to_string(kKeyChunk) + ", got " +
                        std::to_string(partitions.partition_tokens));
    require(n_rows >= 0 && (n_rows == 0 || n_tiles >= 1), kernel,
            std::to_string(n_rows) + " rows need at least one tile, got " + std::to_string(n_tiles));
    require(partitions.n_partitions == 1 || workspace != nullptr, kernel,
            "several partitions need a workspace (attention_workspace_floats)");
    require(int64_t{n_rows} * n_heads <= INT_MAX, kernel, "n_rows * n_heads exceeds the merge grid");

    return {.q = args.q,
            .row_seq = args.row_seq,
            .row_pos = args.row_pos,
            .tiles = tiles,
            .out = args.out,
            .workspace = workspace,
            .ml_offset = int64_t{n_rows} * n_heads * partitions.n_partitions * head_dim,
            .n_rows = n_rows,
            .n_heads = n_heads,
            .n_kv_heads = n_kv_heads,
            .head_dim = head_dim,
            .window = args.window,
            .scale = args.scale,
            .softcap = 0.0f,
            .n_partitions = partitions.n_partitions,
            .partition_tokens = partitions.partition_tokens,
            .vector_loads = false};
}

template <class T>
PagedCache<T> paged_cache(const PagedAttentionArgs& args) {
    return {static_cast<const T*>(args.k_cache), static_cast<const T*>(args.v_cache), args.block_tables,
            args.table_stride, args.block_size, args.n_kv_heads, args.head_dim};
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <class Cache>
void launch_attention(const Cache& cache, AttentionLaunch a, int n_tiles, const char* kernel, cudaStream_t stream) {
    if (a.n_rows == 0) return;
    constexpr int kWidth = 16 / sizeof(typename Cache::Elem);
    a.vector_loads = a.head_dim % kWidth == 0 && aligned16(cache.k) && aligned16(cache.v);
    const size_t smem = attention_smem_bytes(a.head_dim);
    if (smem > kDefaultSmemLimit)
        check(cudaFuncSetAttribute(attention_kernel<Cache>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(smem)),
              "cudaFuncSetAttribute (attention shared memory)");
    const dim3 grid(static_cast<unsigned>(n_tiles), static_cast<unsigned>(a.n_kv_heads),
                    static_cast<unsigned>(a.n_partitions));
    attention_kernel<Cache><<<grid, kThreads, smem, stream>>>(cache, a);
    check_launch(kernel);
    if (a.n_partitions > 1) {
        const unsigned threads = static_cast<unsigned>((a.head_dim + 31) / 32 * 32);
        merge_partitions_kernel<<<static_cast<unsigned>(a.n_rows * a.n_heads), threads, 0, stream>>>(
            a.out, a.workspace, a.ml_offset, a.head_dim, a.n_partitions);
        check_launch("attention merge_partitions_kernel");
    }
}

}  // namespace

void paged_attention(const PagedAttentionArgs& args, const AttentionTile* tiles, int n_tiles,
                     const AttentionPartitions& partitions, float* workspace, cudaStream_t stream) {
    const char* kernel = "paged_attention";
    AttentionLaunch a = attention_launch(kernel, args, tiles, n_tiles, partitions, workspace);
    require(args.block_size >= 1, kernel, "block_size must be at least 1, got " + std::to_string(args.block_size));
    require(args.softcap >= 0.0f && std::isfinite(args.softcap), kernel,
            "softcap must be 0 (none) or a positive number, got " + std::to_string(args.softcap));
    a.softcap = args.softcap;
    if (args.kv_dtype == KvDtype::f16) {
        launch_attention(paged_cache<uint16_t>(args), a, n_tiles, kernel, stream);
    } else {
        launch_attention(paged_cache<float>(args), a, n_tiles, kernel, stream);
    }
}

void contiguous_attention(const ContiguousAttentionArgs& args, const AttentionTile* tiles, int n_tiles,
                          const AttentionPartitions& partitions, float* workspace, cudaStream_t stream) {
    const char* kernel = "contiguous_attention";
    const AttentionLaunch a = attention_launch(kernel, args, tiles, n_tiles, partitions, workspace);
    require(args.max_seq >= 1, kernel, "max_seq must be at least 1, got " + std::to_string(args.max_seq));
    const ContiguousCache cache{args.k_cache, args.v_cache, args.max_seq, args.n_kv_heads, args.head_dim};
    launch_attention(cache, a, n_tiles, kernel, stream);
}

}  // namespace kvx::cuda
