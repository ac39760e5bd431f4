// The paged KV cache's writes and copies: appending a batch's keys and values, copying whole blocks
// (copy-on-write, beam forks), and the physical beam reorder of a contiguous cache. All are pure data
// movement (plus fp16 rounding), so they are designed around wide, coalesced memory accesses.
//
// Thread mapping
//   kv_append     One block per batch row (gridDim.x = n_rows; a row whose slot is -1 returns at once, the
//                 whole block alike). The block's threads walk the row's [n_kv_heads][head_dim] elements in
//                 items of 4 (a float4 read; a float4 or 8 bytes of fp16 written) when head_dim % 4 == 0 and
//                 the pointers allow, else one element; each item goes to
//                 cache[block][head][offset][j], block = slot / block_size, offset = slot % block_size.
//   copy_blocks,  One kernel, copy_regions_kernel: gridDim.x = 2 x regions (region i of the K cache, then of
//   reorder_beams the V cache: one launch for both), gridDim.y = pieces of one region, so that a few large
//                 regions still spread over the GPU. A region is a block (copy_blocks: bytes [src, src + 1) x
//                 block_bytes onto dst) or a beam (reorder_beams: old[beam_indices[i]] onto new[i]). Threads
//                 copy units of 16 bytes when every region's size and base address allow, else 4 bytes, else 1:
//                 the unit is a template parameter, chosen once per launch on the host.
//   No shared memory. Element offsets are int64 (a layer's cache easily passes 2^31 elements).
//
// Sources and destinations never overlap (copy_blocks: no pair's dst is another's src, as kernels.h
// requires; reorder_beams: out of place), so no region's copy depends on another's and all run at once.
#include <algorithm>
#include <cstdint>

#include "cuda/kernels/cuda_check.h"
#include "cuda/kernels/cuda_kernels.h"
#include "cuda/kernels/device_vector.cuh"
#include "cuda/kernels/launch_shape.h"

namespace kvx::cuda {
namespace {

constexpr int kAppendThreads = 128;
constexpr int kCopyThreads = 256;
constexpr int kCopyUnitsPerThread = 4;  // units one thread copies per region piece before the grid grows in y
constexpr unsigned kMaxGridY = 65535;

// ---- kv_append ----

template <int kVec>
__device__ __forceinline__ void store_cache_item(float* cache, int64_t at, const float (&v)[kVec]) {
    store_floats<kVec>(cache + at, v);
}
template <int kVec>
__device__ __forceinline__ void store_cache_item(uint16_t* cache, int64_t at, const float (&v)[kVec]) {
    store_floats_as_f16<kVec>(cache + at, v);
}

// T: float (fp32 cache) or uint16_t (fp16 bits). k, v [n_rows][n_kv_heads][head_dim]; slots [n_rows].
template <class T, int kVec>
__global__ void kv_append_kernel(T* k_cache, T* v_cache, const float* k, const float* v, const int64_t* slots,
                                 int n_kv_heads, int head_dim, int block_size) {
    const int64_t slot = slots[blockIdx.x];
    if (slot < 0) return;
    const int64_t block = slot / block_size;
    const int64_t offset = slot % block_size;
    const int64_t row = static_cast<int64_t>(blockIdx.x) * n_kv_heads * head_dim;
    const int per_head = head_dim / kVec;
    const int items = n_kv_heads * per_head;
    for (int i = static_cast<int>(threadIdx.x); i < items; i += static_cast<int>(blockDim.x)) {
        const int h = i / per_head;
        const int j = (i - h * per_head) * kVec;
        const int64_t src = row + static_cast<int64_t>(h) * head_dim + j;
        const int64_t dst = ((block * n_kv_heads + h) * block_size + offset) * head_dim + j;
        float item[kVec];
        load_floats<kVec>(k + src, item);
        store_cache_item<kVec>(k_cache, dst, item);
        load_floats<kVec>(v + src, item);
        store_cache_item<kVec>(v_cache, dst, item);
    }
}

template <class T>
void launch_kv_append(T* k_cache, T* v_cache, const float* k, const float* v, const int64_t* slots, int n_rows,
                      int n_kv_heads, int head_dim, int block_size, cudaStream_t stream) {
    constexpr uintptr_t kCacheVectorBytes = 4 * sizeof(T);
    const bool vec = head_dim % 4 == 0 && is_aligned(k, 16) && is_aligned(v, 16) &&
                     is_aligned(k_cache, kCacheVectorBytes) && is_aligned(v_cache, kCacheVectorBytes);
    const auto blocks = static_cast<unsigned>(n_rows);
    if (vec)
        kv_append_kernel<T, 4><<<blocks, kAppendThreads, 0, stream>>>(k_cache, v_cache, k, v, slots, n_kv_heads,
                                                                       head_dim, block_size);
    else
        kv_append_kernel<T, 1><<<blocks, kAppendThreads, 0, stream>>>(k_cache, v_cache, k, v, slots, n_kv_heads,
                                                                       head_dim, block_size);
    check_launch("kv_append");
}

// ---- copy_blocks, reorder_beams ----

// Where region i of a launch comes from and goes to, in bytes from the caches' bases: copy_blocks names
// both ends in pairs; reorder_beams writes region i from region source_index[i].
struct RegionCopies {
    unsigned char* dst[2];        // K, V
    const unsigned char* src[2];  // K, V (copy_blocks: the same caches as dst)
    const BlockCopy* pairs;       // [n_regions], or null
    const int32_t* source_index;  // [n_regions] when pairs is null
    int64_t region_bytes;
};

// Unit: uint4 (16 bytes), uint32_t or unsigned char; region_bytes and every region's address are multiples
// of sizeof(Unit).
template <class Unit>
__global__ void copy_regions_kernel(RegionCopies c, int n_regions) {
    const int region = static_cast<int>(blockIdx.x % static_cast<unsigned>(n_regions));
    const int cache = static_cast<int>(blockIdx.x / static_cast<unsigned>(n_regions));  // 0: K, 1: V
    int64_t src_index, dst_index;
    if (c.pairs) {
        src_index = c.pairs[region].src;
        dst_index = c.pairs[region].dst;
    } else {
        src_index = c.source_index[region];
        dst_index = region;
    }
    // Selected, not indexed: an index into the parameter struct would copy it to local memory.
    const unsigned char* src_base = cache == 0 ? c.src[0] : c.src[1];
    unsigned char* dst_base = cache == 0 ? c.dst[0] : c.dst[1];
    const Unit* src = reinterpret_cast<const Unit*>(src_base + src_index * c.region_bytes);
    Unit* dst = reinterpret_cast<Unit*>(dst_base + dst_index * c.region_bytes);
    const int64_t units = c.region_bytes / static_cast<int64_t>(sizeof(Unit));
    const int64_t stride = static_cast<int64_t>(gridDim.y) * blockDim.x;
    for (int64_t u = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x; u < units; u += stride) dst[u] = src[u];
}

void launch_copy_regions(const char* name, const RegionCopies& c, int n_regions, cudaStream_t stream) {
    if (n_regions == 0 || c.region_bytes == 0) return;
    require(n_regions <= INT32_MAX / 2, name, "too many regions for one launch");
    auto fits = [&](uintptr_t unit) {
        bool ok = c.region_bytes % static_cast<int64_t>(unit) == 0;
        for (int i = 0; i < 2; ++i) ok = ok && is_aligned(c.dst[i], unit) && is_aligned(c.src[i], unit);
        return ok;
    };
    const uintptr_t unit = fits(16) ? 16 : fits(4) ? 4 : 1;
    const int64_t units = c.region_bytes / static_cast<int64_t>(unit);
    const int64_t pieces = (units + int64_t{kCopyThreads} * kCopyUnitsPerThread - 1) / (int64_t{kCopyThreads} * kCopyUnitsPerThread);
    const dim3 grid(static_cast<unsigned>(2 * n_regions), static_cast<unsigned>(std::min<int64_t>(pieces, kMaxGridY)));
    if (unit == 16)
        copy_regions_kernel<uint4><<<grid, kCopyThreads, 0, stream>>>(c, n_regions);
    else if (unit == 4)
        copy_regions_kernel<uint32_t><<<grid, kCopyThreads, 0, stream>>>(c, n_regions);
    else
        copy_regions_kernel<unsigned char><<<grid, kCopyThreads, 0, stream>>>(c, n_regions);
    check_launch(name);
}

}  // namespace

void kv_append(void* k_cache, void* v_cache, KvDtype kv_dtype, const float* k, const float* v, const int64_t* slots,
               int n_rows, int n_kv_heads, int head_dim, int block_size, cudaStream_t stream) {
    require(n_rows >= 0 && n_kv_heads >= 0 && head_dim >= 0, "kv_append", "negative row count, head count or head_dim");
    require(block_size > 0, "kv_append", "block_size must be positive");
    if (n_rows == 0 || n_kv_heads == 0 || head_dim == 0) return;
    if (kv_dtype == KvDtype::f16)
        launch_kv_append(static_cast<uint16_t*>(k_cache), static_cast<uint16_t*>(v_cache), k, v, slots, n_rows,
                         n_kv_heads, head_dim, block_size, stream);
    else
        launch_kv_append(static_cast<float*>(k_cache), static_cast<float*>(v_cache), k, v, slots, n_rows, n_kv_heads,
                         head_dim, block_size, stream);
}

void copy_blocks(void* k_cache, void* v_cache, const BlockCopy* pairs, int n_pairs, int64_t block_elems,
                 int elem_bytes, cudaStream_t stream) {
    require(n_pairs >= 0 && block_elems >= 0 && elem_bytes > 0, "copy_blocks", "negative pair count or block size");
    RegionCopies c{};
    c.dst[0] = static_cast<unsigned char*>(k_cache);
    c.dst[1] = static_cast<unsigned char*>(v_cache);
    c.src[0] = c.dst[0];
    c.src[1] = c.dst[1];
    c.pairs = pairs;
    c.region_bytes = block_elems * elem_bytes;
    launch_copy_regions("copy_blocks", c, n_pairs, stream);
}

void reorder_beams(void* new_k, void* new_v, const void* old_k, const void* old_v, const int32_t* beam_indices,
                   int n_beams, int64_t beam_elems, int elem_bytes, cudaStream_t stream) {
    require(n_beams >= 0 && beam_elems >= 0 && elem_bytes > 0, "reorder_beams", "negative beam count or beam size");
    RegionCopies c{};
    c.dst[0] = static_cast<unsigned char*>(new_k);
    c.dst[1] = static_cast<unsigned char*>(new_v);
    c.src[0] = static_cast<const unsigned char*>(old_k);
    c.src[1] = static_cast<const unsigned char*>(old_v);
    c.source_index = beam_indices;
    c.region_bytes = beam_elems * elem_bytes;
    launch_copy_regions("reorder_beams", c, n_beams, stream);
}

}  // namespace kvx::cuda
