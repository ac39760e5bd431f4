// Token selection on the device: greedy argmax over rows of logits, and Sampler::sample's temperature > 0
// path (engine/runtime/sampler.cpp) for one row, bit for bit, so that a seeded run picks the same tokens on either
// side while the logits never leave the GPU.
//
// argmax
//   One block of kReduceThreads per row. Each thread scans elements t, t + blockDim, ... keeping the best
//   (value, index): larger value, or equal value and lower index; a NaN is skipped (in the host's argmax it
//   never compares greater). Warp shuffles, then one warp over the warps' bests in shared memory
//   (best_value [32], best_index [32]) combine them the same way. The host's argmax starts from element 0, so
//   when logits[0] is NaN it stays the answer, and so it is here.
//
// sample_top_k_top_p: three launches on one row of `vocab` logits
//   1. argmax_kernel, one block       scratch's max_index = the host's argmax (so max_logit is its logits[i])
//   2. probabilities_kernel, grid     scratch's probs [vocab] = (float) exp(((double) logit - max) / T), in
//                                     double like the host, so every probability has the host's bits
//                                     (up to exp's last bit in double: see the note below)
//   3. select_and_draw_kernel, one block of kSelectThreads (1024):
//      a. radix select of the k = min(top_k, vocab)-th largest probability. Probabilities are >= +0 floats,
//         whose bit patterns order as unsigned integers. Four passes of 8 bits, most significant first: a
//         histogram (histogram [256] in shared memory, shared atomics) of the digit of every element that
//         matches the bits chosen so far, then a block scan over the digits from 255 down finds the digit
//         holding the k-th largest. The result: the threshold bits, and `wanted_equal`, how many elements
//         equal to the threshold belong to the top k (the rest of the top k is strictly greater).
//      b. collection into keys [kMaxDeviceTopK] (shared, uint64 (p bits << 32 | ~index)): the elements
//         above the threshold at slots from a shared atomic counter (their order is fixed by the sort), the
//         equal ones in index order through a block scan per chunk of 1024 elements, so that the lowest
//         indices win, as the host's (p desc, index asc) ordering says.
//      c. bitonic sort of the k keys (padded with 0, which sorts last) in shared memory, descending: the
//         order (p desc, index asc) of the host's partial_sort.
//      d. thread 0 walks the sorted candidates in double exactly as the host does: total, the top-p prefix,
//         r = uniform * total, the first candidate whose running sum exceeds r.
//   top_k <= kMaxDeviceTopK = 1024 keeps the candidates in one block's shared memory and the sequential walks
//   short.
//
// Shared memory of select_and_draw_kernel: keys [1024] uint64 (8 KiB), histogram [256] uint32, scan_totals
// [32] uint32, a few scalars.
//
// Bit-exactness: the division and the sums are IEEE double on both sides; r = uniform * (total - 0) + 0
// is libstdc++'s uniform_real_distribution<double>(0, total) given uniform = generate_canonical<double, 53>.
// The one difference is exp: CUDA's double exp is within 1 ulp and glibc's is correctly rounded in practice,
// so a probability's double can differ in its last bit, which changes the float only when the double lies
// within an ulp of a float rounding boundary (about one value in 2^28).
#include <cmath>
#include <cstdint>

#include "cuda/kernels/cuda_check.h"
#include "cuda/kernels/cuda_kernels.h"
#include "cuda/kernels/device_reduce.cuh"
#include "cuda/kernels/launch_shape.h"

namespace kvx::cuda {
namespace {

constexpr int kReduceThreads = 512;    // argmax: one row per block
constexpr int kSelectThreads = 1024;   // select_and_draw: the whole row in one block
constexpr int kProbabilityThreads = 256;
constexpr int32_t kNoIndex = INT32_MAX;  // a (value, index) pair that has seen no element yet

// Scratch layout: max_index [1] int32, padded to 16 bytes; probs [vocab] float.
constexpr size_t kProbsOffset = 16;

__device__ __forceinline__ bool better(float value, int32_t index, float best_value, int32_t best_index) {
    return value > best_value || (value == best_value && index < best_index);
}

// Every lane gets the best (value, index) of the warp's: the order `better` defines is total over non-NaN
// values, so the butterfly's pairings all agree. All 32 lanes must be active.
__device__ __forceinline__ void warp_best(float& value, int32_t& index) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        const float other_value = __shfl_xor_sync(kFullWarp, value, offset);
        const int32_t other_index = __shfl_xor_sync(kFullWarp, index, offset);
        if (better(other_value, other_index, value, index)) {
            value = other_value;
            index = other_index;
        }
    }
}

// The host's argmax of row [vocab]. Every thread of the block must call it; the result is valid in thread 0.
__device__ int32_t block_argmax(const float* row, int vocab) {
    __shared__ float best_value[32];
    __shared__ int32_t best_index[32];
    float value = -INFINITY;
    int32_t index = kNoIndex;
    for (int i = static_cast<int>(threadIdx.x); i < vocab; i += static_cast<int>(blockDim.x)) {
        const float v = row[i];
        if (!isnan(v) && better(v, i, value, index)) {
            value = v;
            index = i;
        }
    }
    warp_best(value, index);
    const int lane = static_cast<int>(threadIdx.x % 32);
    const int warp = static_cast<int>(threadIdx.x / 32);
    if (lane == 0) {
        best_value[warp] = value;
        best_index[warp] = index;
    }
    __syncthreads();
    if (warp == 0) {
        const bool present = lane < static_cast<int>(blockDim.x / 32);
        value = present ? best_value[lane] : -INFINITY;
        index = present ? best_index[lane] : kNoIndex;
        warp_best(value, index);
    }
    // Element 0 wins when it is NaN (nothing compares greater than the host's starting point) or when every
    // element is NaN.
    return isnan(row[0]) || index == kNoIndex ? 0 : index;
}

// tokens [n_rows]; logits [n_rows][vocab]; one block per row.
__global__ void __launch_bounds__(kReduceThreads) argmax_kernel(int32_t* tokens, const float* logits, int vocab) {
    const int32_t best = block_argmax(logits + static_cast<int64_t>(blockIdx.x) * vocab, vocab);
    if (threadIdx.x == 0) tokens[blockIdx.x] = best;
}

__global__ void probabilities_kernel(float* probs, const float* logits, const int32_t* max_index, int vocab,
                                     float temperature) {
    const double max_logit = logits[*max_index];
    const int stride = static_cast<int>(gridDim.x * blockDim.x);
    for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < vocab; i += stride)
        probs[i] = static_cast<float>(exp((static_cast<double>(logits[i]) - max_logit) / static_cast<double>(temperature)));
}

// Inclusive prefix sum of value over the block's threads (blockDim.x a multiple of 32, every thread calling);
// *total gets the block's sum. scan_totals [32] in shared memory; the trailing barrier lets the next call
// overwrite it.
__device__ uint32_t block_inclusive_scan(uint32_t value, uint32_t* scan_totals, uint32_t* total) {
    const int lane = static_cast<int>(threadIdx.x % 32);
    const int warp = static_cast<int>(threadIdx.x / 32);
    const int n_warps = static_cast<int>(blockDim.x / 32);
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
        const uint32_t below = __shfl_up_sync(kFullWarp, value, offset);
        if (lane >= offset) value += below;
    }
    if (lane == 31) scan_totals[warp] = value;
    __syncthreads();
    if (warp == 0) {
        uint32_t t = lane < n_warps ? scan_totals[lane] : 0;
#pragma unroll
        for (int offset = 1; offset < 32; offset <<= 1) {
            const uint32_t below = __shfl_up_sync(kFullWarp, t, offset);
            if (lane >= offset) t += below;
        }
        scan_totals[lane] = t;  // inclusive over warps
    }
    __syncthreads();
    const uint32_t result = value + (warp > 0 ? scan_totals[warp - 1] : 0u);
    *total = scan_totals[n_warps - 1];
    __syncthreads();
    return result;
}

__device__ __forceinline__ uint64_t candidate_key(uint32_t p_bits, int index) {
    return (static_cast<uint64_t>(p_bits) << 32) | (0xffffffffu - static_cast<uint32_t>(index));
}

__global__ void __launch_bounds__(kSelectThreads)
    select_and_draw_kernel(int32_t* token, const float* probs, int vocab, int top_k, float top_p, double uniform) {
    __shared__ uint64_t keys[kMaxDeviceTopK];  // [k] the kept candidates, then sorted descending
    __shared__ uint32_t histogram[256];        // per digit value, one radix pass
    __shared__ uint32_t scan_totals[32];       // block_inclusive_scan's per-warp totals
    __shared__ uint32_t chosen_digit, chosen_remaining, greater_count;

    const int tid = static_cast<int>(threadIdx.x);
    const int k = min(top_k, vocab);
    const uint32_t* bits = reinterpret_cast<const uint32_t*>(probs);

    // a. Radix select: after the pass at `shift`, prefix holds the top bits of the k-th largest, and
    // `remaining` is its rank among the elements that share them.
    uint32_t prefix = 0, prefix_mask = 0, remaining = static_cast<uint32_t>(k);
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int d = tid; d < 256; d += kSelectThreads) histogram[d] = 0;
        __syncthreads();
        for (int i = tid; i < vocab; i += kSelectThreads) {
            const uint32_t b = bits[i];
            if ((b & prefix_mask) == prefix) atomicAdd(&histogram[(b >> shift) & 0xffu], 1u);
        }
        __syncthreads();
        // Thread t counts digit 255 - t, so the inclusive scan is the count of elements at or above that digit.
        const uint32_t count = tid < 256 ? histogram[255 - tid] : 0u;
        uint32_t unused_total;
        const uint32_t at_or_above = block_inclusive_scan(count, scan_totals, &unused_total);
        const uint32_t above = at_or_above - count;
        if (tid < 256 && above < remaining && remaining <= at_or_above) {  // exactly one thread
            chosen_digit = static_cast<uint32_t>(255 - tid);
            chosen_remaining = remaining - above;
        }
        __syncthreads();
        prefix |= chosen_digit << shift;
        prefix_mask |= 0xffu << shift;
        remaining = chosen_remaining;
    }
    const uint32_t threshold = prefix;
    const uint32_t wanted_equal = remaining;                       // the lowest-index ones equal to threshold
    const uint32_t wanted_greater = static_cast<uint32_t>(k) - wanted_equal;  // all of those above it

    // b. Collection, in chunks of kSelectThreads consecutive indices.
    if (tid == 0) greater_count = 0;
    __syncthreads();
    uint32_t equal_taken = 0;  // the same in every thread
    for (int base = 0; base < vocab; base += kSelectThreads) {
        const int i = base + tid;
        const uint32_t b = i < vocab ? bits[i] : 0u;
        if (i < vocab && b > threshold) keys[atomicAdd(&greater_count, 1u)] = candidate_key(b, i);
        if (equal_taken < wanted_equal) {  // uniform: the scan's barriers see every thread or none
            const bool equal = i < vocab && b == threshold;
            uint32_t chunk_equal;
            const uint32_t rank = block_inclusive_scan(equal ? 1u : 0u, scan_totals, &chunk_equal);
            if (equal && equal_taken + rank <= wanted_equal) keys[wanted_greater + equal_taken + rank - 1] = candidate_key(b, i);
            equal_taken += chunk_equal;
        }
    }

    // c. Bitonic sort, descending, of keys [0, n_sort), n_sort the power of two at or above k.
    int n_sort = 1;
    while (n_sort < k) n_sort <<= 1;
    for (int i = k + tid; i < n_sort; i += kSelectThreads) keys[i] = 0;
    __syncthreads();
    for (int size = 2; size <= n_sort; size <<= 1) {
        for (int stride = size / 2; stride > 0; stride >>= 1) {
            for (int i = tid; i < n_sort; i += kSelectThreads) {
                const int j = i ^ stride;
                if (j > i) {
                    const bool descending = (i & size) == 0;
                    const uint64_t a = keys[i], b = keys[j];
                    if (descending ? a < b : a > b) {
                        keys[i] = b;
                        keys[j] = a;
                    }
                }
            }
            __syncthreads();
        }
    }

    // d. The host's walks, in its order and precision.
    if (tid != 0) return;
    auto p_of = [&](int i) { return static_cast<double>(__uint_as_float(static_cast<uint32_t>(keys[i] >> 32))); };
    auto index_of = [&](int i) { return static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(keys[i])); };
    int kept = k;
    double total = 0;
    for (int i = 0; i < kept; ++i) total += p_of(i);
    if (top_p < 1.0f) {
        double mass = 0;
        for (int i = 0; i < kept; ++i) {
            mass += p_of(i);
            if (mass >= static_cast<double>(top_p) * total) {
                kept = i + 1;
                total = mass;
                break;
            }
        }
    }
    const double r = uniform * (total - 0.0) + 0.0;
    double cumulative = 0;
    for (int i = 0; i < kept; ++i) {
        cumulative += p_of(i);
        if (r < cumulative) {
            *token = index_of(i);
            return;
        }
    }
    *token = index_of(kept - 1);
}

}  // namespace

void argmax(int32_t* tokens, const float* logits, int n_rows, int vocab, cudaStream_t stream) {
    require(n_rows >= 0, "argmax", "negative row count");
    require(vocab >= 1, "argmax", "vocab must be at least 1");
    if (n_rows == 0) return;
    argmax_kernel<<<static_cast<unsigned>(n_rows), kReduceThreads, 0, stream>>>(tokens, logits, vocab);
    check_launch("argmax");
}

size_t sampling_scratch_bytes(int vocab) { return kProbsOffset + sizeof(float) * static_cast<size_t>(vocab > 0 ? vocab : 0); }

void sample_top_k_top_p(int32_t* token, const float* logits, int vocab, float temperature, int top_k, float top_p,
                        double uniform, void* scratch, cudaStream_t stream) {
    require(vocab >= 1, "sample_top_k_top_p", "vocab must be at least 1");
    require(top_k >= 1 && top_k <= kMaxDeviceTopK, "sample_top_k_top_p",
            "top_k must be in 1 .. 1024 on the device (kMaxDeviceTopK)");
    require(temperature > 0.0f && std::isfinite(temperature), "sample_top_k_top_p",
            "temperature must be a finite number > 0 (0 is greedy: use argmax)");
    require(top_p > 0.0f && top_p <= 1.0f, "sample_top_k_top_p", "top_p must be in (0, 1]");
    // [0, 1], not [0, 1): a libstdc++ older than LWG 2524's fix can draw exactly 1, which both sides then
    // turn into the last kept candidate.
    require(uniform >= 0.0 && uniform <= 1.0, "sample_top_k_top_p", "uniform must be in [0, 1]");
    auto* max_index = static_cast<int32_t*>(scratch);
    auto* probs = reinterpret_cast<float*>(static_cast<unsigned char*>(scratch) + kProbsOffset);

    argmax_kernel<<<1, kReduceThreads, 0, stream>>>(max_index, logits, vocab);
    check_launch("sample_top_k_top_p (argmax)");
    probabilities_kernel<<<grid_stride_blocks(vocab, kProbabilityThreads), kProbabilityThreads, 0, stream>>>(
        probs, logits, max_index, vocab, temperature);
    check_launch("sample_top_k_top_p (probabilities)");
    select_and_draw_kernel<<<1, kSelectThreads, 0, stream>>>(token, probs, vocab, top_k, top_p, uniform);
    check_launch("sample_top_k_top_p (select and draw)");
}

}  // namespace kvx::cuda
