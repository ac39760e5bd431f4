// Benchmarks of the kernels that write and move the paged KV cache: kv_append (a decode batch's rows, one
// per sequence, and a prefill chunk's consecutive rows), copy_blocks (copy-on-write pairs of one layer) and
// reorder_beams (the contiguous cache's physical beam reorder, what copy_blocks replaces). Cache shape of
// one SmolLM2-135M layer: 3 KV heads of 64.
#include <numeric>
#include <random>
#include <type_traits>
#include <vector>

#include "tools/bench/support/bench_support.h"

namespace kvx::bench {
namespace {

constexpr int kKvHeads = 3, kHeadDim = 64;
// A pool of 4096 blocks: 48 MiB per fp32 cache at block size 16, past the L3, as a server's cache is.
constexpr int kPoolBlocks = 4096;

template <class T>
struct PoolCaches {
    std::vector<T> k, v;  // [kPoolBlocks][kKvHeads][block_size][kHeadDim], fp32 or fp16 bits
};

template <class T>
PoolCaches<T> make_pool(int block_size) {
    PoolCaches<T> c;
    const size_t n = static_cast<size_t>(kPoolBlocks) * kKvHeads * static_cast<size_t>(block_size) * kHeadDim;
    c.k.assign(n, T{});
    c.v.assign(n, T{});
    return c;
}

// The first `count` of a random permutation of the pool's block ids.
std::vector<int32_t> random_blocks(int count, unsigned seed) {
    std::vector<int32_t> ids(kPoolBlocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
    ids.resize(static_cast<size_t>(count));
    return ids;
}

// Arguments: threads, rows. Chunk: the rows are one prefill chunk's consecutive positions; otherwise each
// row is a different sequence's next position, in a block of its own.
template <class T, bool Chunk>
void kv_append(benchmark::State& state) {
    use_threads(state);
    const int rows = static_cast<int>(state.range(1));
    constexpr int kBlockSize = 16;
    PoolCaches<T>& cache = reuse_or_make<PoolCaches<T>>(kBlockSize, [] { return make_pool<T>(kBlockSize); });
    std::vector<float> k(static_cast<size_t>(rows) * kKvHeads * kHeadDim), v(k.size());  // [rows][kKvHeads][kHeadDim]
    fill_random(k, 7);
    fill_random(v, 8);
    std::vector<int64_t> slots(static_cast<size_t>(rows));  // [rows]
    const std::vector<int32_t> blocks = random_blocks(rows, 9);
    for (int r = 0; r < rows; ++r)
        slots[static_cast<size_t>(r)] = Chunk ? int64_t{blocks[0]} * kBlockSize + r
                                              : int64_t{blocks[static_cast<size_t>(r)]} * kBlockSize + 5;
    const KernelTable& kernels = kernels_under_test();
    for (auto _ : state) {
        if constexpr (std::is_same_v<T, float>) {
            kernels.kv_append(cache.k.data(), cache.v.data(), k.data(), v.data(), slots.data(), rows, kKvHeads,
                              kHeadDim, kBlockSize);
        } else {
            kernels.kv_append_f16(cache.k.data(), cache.v.data(), k.data(), v.data(), slots.data(), rows, kKvHeads,
                                  kHeadDim, kBlockSize);
        }
        benchmark::ClobberMemory();
    }
    // fp32 K and V rows read, cache rows written, slots read.
    const double elements = 2.0 * rows * kKvHeads * kHeadDim;
    report_per_call(state, elements * (4.0 + sizeof(T)) + 8.0 * rows, 0);
}

// Arguments: threads, pairs, block.
template <class T>
void copy_blocks(benchmark::State& state) {
    use_threads(state);
    const int n_pairs = static_cast<int>(state.range(1));
    const int block_size = static_cast<int>(state.range(2));
    PoolCaches<T>& cache = reuse_or_make<PoolCaches<T>>(block_size, [&] { return make_pool<T>(block_size); });
    // Sources and destinations drawn from one permutation: no destination is another pair's source.
    const std::vector<int32_t> blocks = random_blocks(2 * n_pairs, 10);
    std::vector<BlockCopy> pairs;  // [n_pairs]
    for (size_t i = 0; i < static_cast<size_t>(n_pairs); ++i) pairs.push_back({blocks[2 * i], blocks[2 * i + 1]});
    const int64_t block_elems = int64_t{kKvHeads} * block_size * kHeadDim;
    const KernelTable& kernels = kernels_under_test();
    for (auto _ : state) {
        kernels.copy_blocks(cache.k.data(), cache.v.data(), pairs.data(), n_pairs, block_elems, sizeof(T));
        benchmark::ClobberMemory();
    }
    // Each pair's K and V block read and written.
    report_per_call(state, 4.0 * n_pairs * static_cast<double>(block_elems) * sizeof(T), 0);
}

// Arguments: threads, beams, context. fp32, out of place, the better half of the beams having two children.
void reorder_beams(benchmark::State& state) {
    use_threads(state);
    const int beams = static_cast<int>(state.range(1));
    const int context = static_cast<int>(state.range(2));
    const int64_t beam_elems = int64_t{kKvHeads} * context * kHeadDim;
    const size_t n = static_cast<size_t>(beams * beam_elems);
    std::vector<float> old_k(n, 1.0f), old_v(n, 2.0f), new_k(n), new_v(n);  // [beams][kKvHeads][context][kHeadDim]
    std::vector<int32_t> beam_indices(static_cast<size_t>(beams));          // [beams]
    for (int i = 0; i < beams; ++i) beam_indices[static_cast<size_t>(i)] = i / 2;
    const BaselineKernelTable& baselines = baseline_kernels_under_test();
    for (auto _ : state) {
        baselines.reorder_beams(new_k.data(), new_v.data(), old_k.data(), old_v.data(), beam_indices.data(), beams,
                              beam_elems, sizeof(float));
        benchmark::ClobberMemory();
    }
    report_per_call(state, 4.0 * static_cast<double>(n) * sizeof(float), 0);
}

void decode_rows(benchmark::internal::Benchmark* b) { sweep(b, {"threads", "rows"}, {thread_counts(), {1, 8, 64}}); }
void chunk_rows(benchmark::internal::Benchmark* b) { sweep(b, {"threads", "rows"}, {thread_counts(), {512}}); }
void block_pairs(benchmark::internal::Benchmark* b) {
    sweep(b, {"threads", "pairs", "block"}, {thread_counts(), {1, 8, 64}, {8, 16, 32, 64}});
}
void beam_contexts(benchmark::internal::Benchmark* b) {
    sweep(b, {"threads", "beams", "context"}, {thread_counts(), {4, 8, 16}, {128, 1024, 4096}});
}

BENCHMARK(kv_append<float, false>)->Name("kv_append/f32_decode")->Apply(decode_rows);
BENCHMARK(kv_append<float, true>)->Name("kv_append/f32_chunk")->Apply(chunk_rows);
BENCHMARK(kv_append<uint16_t, false>)->Name("kv_append/f16_decode")->Apply(decode_rows);
BENCHMARK(kv_append<uint16_t, true>)->Name("kv_append/f16_chunk")->Apply(chunk_rows);
BENCHMARK(copy_blocks<float>)->Name("copy_blocks/f32")->Apply(block_pairs);
BENCHMARK(copy_blocks<uint16_t>)->Name("copy_blocks/f16")->Apply(block_pairs);
BENCHMARK(reorder_beams)->Name("reorder_beams/f32")->Apply(beam_contexts);

}  // namespace
}  // namespace kvx::bench
