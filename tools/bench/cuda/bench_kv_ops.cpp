// The KV cache's bookkeeping kernels at a 1B-class Llama's layer shape (8 KV heads, head_dim 64, block
// size 16), fp32 and fp16 caches (the dtype argument: 0 fp32, 1 fp16):
//   kv_append    one decode step (`rows` sequences, one new row each, every row in its own block) or one
//                prefill chunk (`rows` consecutive positions of one sequence over shuffled blocks);
//                bytes = K and V rows read (fp32) + written (cache dtype).
//   copy_blocks  `pairs` copy-on-write block copies (beam search's forks); bytes = K and V blocks read +
//                written.
// Both are small next to a decode step's GEMVs; what matters is that they run near the copy bandwidth.
#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "cuda/kernels/cuda_check.h"
#include "cuda/kernels/cuda_kernels.h"
#include "tools/bench/cuda/bench_timing.h"

namespace kvx::cuda::bench {
namespace {

constexpr int kKvHeads = 8;
constexpr int kHeadDim = 64;
constexpr int kBlockSize = 16;
constexpr int64_t kBlockElems = int64_t{kKvHeads} * kBlockSize * kHeadDim;

int elem_bytes(KvDtype dtype) { return dtype == KvDtype::f16 ? 2 : 4; }

// A zeroed K and a V pool of `blocks` blocks: what a call writes or copies does not depend on the values.
struct KvPools {
    DeviceBuffer<uint8_t> k, v;  // [blocks][kKvHeads][kBlockSize][kHeadDim] of the cache dtype

    KvPools(size_t blocks, KvDtype dtype) : k(blocks * kBlockElems * elem_bytes(dtype)), v(k.size()) {
        check(cudaMemset(k.data(), 0, k.bytes()), "cudaMemset");
        check(cudaMemset(v.data(), 0, v.bytes()), "cudaMemset");
    }
};

std::vector<int32_t> shuffled_blocks(size_t blocks) {
    std::vector<int32_t> ids(blocks);  // [blocks], a permutation of the pool
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(7));
    return ids;
}

// Arguments: rows, dtype. `rows_per_block`: 1 for a decode step, kBlockSize for a prefill chunk.
void kv_append_rows(benchmark::State& state, int rows_per_block) {
    const int rows = static_cast<int>(state.range(0));
    const KvDtype dtype = state.range(1) == 1 ? KvDtype::f16 : KvDtype::f32;
    const size_t row_elems = static_cast<size_t>(rows) * kKvHeads * kHeadDim;
    const double bytes = 2.0 * static_cast<double>(row_elems) * (4 + elem_bytes(dtype));
    const int copies = rotation_copies(static_cast<size_t>(bytes));
    const int blocks_per_copy = (rows + rows_per_block - 1) / rows_per_block;

    KvPools pools(static_cast<size_t>(copies) * static_cast<size_t>(blocks_per_copy), dtype);
    const DeviceBuffer<float> k = random_f32(static_cast<size_t>(copies) * row_elems, 8);  // [copies][rows][kKvHeads][kHeadDim]
    const DeviceBuffer<float> v = random_f32(k.size(), 9);                                 // as k
    // [copies][rows]: row r of copy c at offset r % kBlockSize of the copy's (r / rows_per_block)-th block.
    const std::vector<int32_t> blocks = shuffled_blocks(pools.k.size() / (kBlockElems * elem_bytes(dtype)));
    std::vector<int64_t> host_slots(static_cast<size_t>(copies) * static_cast<size_t>(rows));
    for (size_t c = 0; c < static_cast<size_t>(copies); ++c)
        for (int r = 0; r < rows; ++r)
            host_slots[c * static_cast<size_t>(rows) + static_cast<size_t>(r)] =
                int64_t{blocks[c * static_cast<size_t>(blocks_per_copy) + static_cast<size_t>(r / rows_per_block)]} * kBlockSize +
                r % kBlockSize;
    const DeviceBuffer<int64_t> slots = upload(host_slots);

    run_timed(state, copies, bytes, [&](int copy, cudaStream_t stream) {
        const size_t at = static_cast<size_t>(copy);
        kv_append(pools.k.data(), pools.v.data(), dtype, k.data() + at * row_elems, v.data() + at * row_elems,
                  slots.data() + at * static_cast<size_t>(rows), rows, kKvHeads, kHeadDim, kBlockSize, stream);
    });
}

void kv_append_decode(benchmark::State& state) { kv_append_rows(state, 1); }
void kv_append_prefill(benchmark::State& state) { kv_append_rows(state, kBlockSize); }

// Arguments: pairs, dtype.
void copy_blocks_pairs(benchmark::State& state) {
    const int pairs = static_cast<int>(state.range(0));
    const KvDtype dtype = state.range(1) == 1 ? KvDtype::f16 : KvDtype::f32;
    const double bytes = 2.0 * 2.0 * pairs * static_cast<double>(kBlockElems) * elem_bytes(dtype);
    const int copies = rotation_copies(static_cast<size_t>(bytes));
    const size_t blocks_per_copy = 2 * static_cast<size_t>(pairs);

    KvPools pools(static_cast<size_t>(copies) * blocks_per_copy, dtype);
    // [copies][pairs]: copy c's pairs take their sources and destinations from its share of a shuffled pool.
    const std::vector<int32_t> blocks = shuffled_blocks(static_cast<size_t>(copies) * blocks_per_copy);
    std::vector<BlockCopy> host_pairs;
    for (size_t i = 0; i < blocks.size(); i += 2) host_pairs.push_back({blocks[i], blocks[i + 1]});
    const DeviceBuffer<BlockCopy> device_pairs = upload(host_pairs);

    run_timed(state, copies, bytes, [&](int copy, cudaStream_t stream) {
        cuda::copy_blocks(pools.k.data(), pools.v.data(), device_pairs.data() + static_cast<size_t>(copy) * static_cast<size_t>(pairs),
                          pairs, kBlockElems, elem_bytes(dtype), stream);
    });
}

}  // namespace

void register_kv_ops_benchmarks() {
    benchmark::internal::Benchmark* decode = register_cuda_benchmark("cuda_kv_append/decode", kv_append_decode, {"rows", "dtype"});
    benchmark::internal::Benchmark* prefill = register_cuda_benchmark("cuda_kv_append/prefill", kv_append_prefill, {"rows", "dtype"});
    benchmark::internal::Benchmark* copies = register_cuda_benchmark("cuda_copy_blocks", copy_blocks_pairs, {"pairs", "dtype"});
    for (int64_t dtype : {0, 1}) {
        for (int64_t rows : {8, 64}) decode->Args({rows, dtype});
        for (int64_t rows : {512, 2048}) prefill->Args({rows, dtype});
        for (int64_t pairs : {16, 256}) copies->Args({pairs, dtype});
    }
}

}  // namespace kvx::cuda::bench
