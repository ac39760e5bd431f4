// CUDA decode attention: paged_attention over fp32 and fp16 KV (every sequence's blocks shuffled over the
// pool, as a long-running server leaves them) against contiguous_attention over fp32 (one region per
// sequence), one query row per sequence at the end of a `context`-long history. Heads of a 1B-class Llama
// (32 query heads, 8 KV heads, head_dim 64), block size 16, tiles and partitions planned for this device.
//
// The layout is the last argument, as in tools/bench/cpu/bench_attention.cpp, so that one size's three runs follow each
// other: 0 contiguous fp32, 1 paged fp32, 2 paged fp16. The paged/contiguous time ratio at each size is the
// cost of paging. bytes = the K and V bytes the call reads.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "cuda/kernels/cuda_kernels.h"
#include "tools/bench/cuda/bench_timing.h"

namespace kvx::cuda::bench {
namespace {

enum Layout : int64_t { kContiguous = 0, kPagedF32 = 1, kPagedF16 = 2 };

constexpr int kHeads = 32;
constexpr int kKvHeads = 8;
constexpr int kHeadDim = 64;
constexpr int kBlockSize = 16;

// `copies` sets of `batch` sequences, each `context` positions long: launch i reads set i % copies, so that
// together the calls read more than the L2 holds.
struct AttentionData {
    int copies = 0;
    int blocks_per_seq = 0;
    // Contiguous: [copies * batch][kKvHeads][context][kHeadDim]. Paged fp32:
    // [copies * batch * blocks_per_seq][kKvHeads][kBlockSize][kHeadDim].
    DeviceBuffer<float> k_f32, v_f32;
    DeviceBuffer<uint16_t> k_f16, v_f16;  // paged fp16: as paged fp32, fp16 bits
    DeviceBuffer<int32_t> block_tables;   // [copies * batch][blocks_per_seq], a shuffled permutation of the pool
    DeviceBuffer<int32_t> row_seq;        // [copies][batch]: set c's row r reads sequence c * batch + r
    DeviceBuffer<int32_t> row_pos;        // [batch], all context - 1
    DeviceBuffer<float> q;                // [batch][kHeads][kHeadDim]
    DeviceBuffer<float> out;              // [batch][kHeads][kHeadDim]
    DeviceBuffer<AttentionTile> tiles;    // [n_tiles]
    int n_tiles = 0;
    AttentionPartitions partitions;
    DeviceBuffer<float> workspace;        // [attention_workspace_floats(batch, kHeads, kHeadDim, n_partitions)]
};

double kv_bytes_per_set(int context, int batch, Layout layout) {
    const double elem = layout == kPagedF16 ? 2.0 : 4.0;
    return 2.0 * batch * static_cast<double>(context) * kKvHeads * kHeadDim * elem;
}

AttentionData make_data(int context, int batch, Layout layout) {
    AttentionData d;
    d.copies = rotation_copies(static_cast<size_t>(kv_bytes_per_set(context, batch, layout)));
    d.blocks_per_seq = (context + kBlockSize - 1) / kBlockSize;
    const size_t sequences = static_cast<size_t>(d.copies) * static_cast<size_t>(batch);
    const size_t positions = sequences * static_cast<size_t>(layout == kContiguous ? context : d.blocks_per_seq * kBlockSize);
    const size_t elems = positions * kKvHeads * kHeadDim;
    if (layout == kPagedF16) {
        d.k_f16 = random_f16(elems, 1);
        d.v_f16 = random_f16(elems, 2);
    } else {
        d.k_f32 = random_f32(elems, 1);
        d.v_f32 = random_f32(elems, 2);
    }
    if (layout != kContiguous) {
        std::vector<int32_t> tables(sequences * static_cast<size_t>(d.blocks_per_seq));
        std::iota(tables.begin(), tables.end(), 0);
        std::shuffle(tables.begin(), tables.end(), std::mt19937(3));
        d.block_tables = upload(tables);
    }
    std::vector<int32_t> row_seq(sequences);
    std::iota(row_seq.begin(), row_seq.end(), 0);
    d.row_seq = upload(row_seq);
    d.row_pos = upload(std::vector<int32_t>(static_cast<size_t>(batch), context - 1));
    d.q = random_f32(static_cast<size_t>(batch) * kHeads * kHeadDim, 4);
    d.out.resize(d.q.size());

    // A tile names rows, not sequences, and every set's rows are `batch` distinct sequences like the first
    // set's: the first set's tiles serve them all.
    const std::vector<AttentionTile> tiles =
        plan_attention_tiles(std::span<const int32_t>(row_seq.data(), static_cast<size_t>(batch)), kHeads / kKvHeads);
    d.n_tiles = static_cast<int>(tiles.size());
    d.tiles = upload(tiles);
    d.partitions = plan_attention_partitions(d.n_tiles, kKvHeads, context, sm_count(),
                                             std::max(1, context / kKeyChunk));
    d.workspace.resize(attention_workspace_floats(batch, kHeads, kHeadDim, d.partitions.n_partitions));
    return d;
}

// The fields paged and contiguous attention share; row_seq is set per launch (the data set it reads).
template <class Args>
Args queries_and_heads(AttentionData& d, int batch) {
    Args a;
    a.q = d.q.data();
    a.row_pos = d.row_pos.data();
    a.out = d.out.data();
    a.n_rows = batch;
    a.n_heads = kHeads;
    a.n_kv_heads = kKvHeads;
    a.head_dim = kHeadDim;
    a.scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
    return a;
}

// Arguments: context, batch, block (always kBlockSize), layout.
void decode_attention(benchmark::State& state) {
    const int context = static_cast<int>(state.range(0));
    const int batch = static_cast<int>(state.range(1));
    const auto layout = static_cast<Layout>(state.range(3));
    AttentionData d = make_data(context, batch, layout);

    auto c = queries_and_heads<ContiguousAttentionArgs>(d, batch);
    c.k_cache = d.k_f32.data();
    c.v_cache = d.v_f32.data();
    c.max_seq = context;

    auto p = queries_and_heads<PagedAttentionArgs>(d, batch);
    p.k_cache = layout == kPagedF16 ? static_cast<const void*>(d.k_f16.data()) : d.k_f32.data();
    p.v_cache = layout == kPagedF16 ? static_cast<const void*>(d.v_f16.data()) : d.v_f32.data();
    p.block_tables = d.block_tables.data();
    p.block_size = kBlockSize;
    p.table_stride = d.blocks_per_seq;
    p.kv_dtype = layout == kPagedF16 ? KvDtype::f16 : KvDtype::f32;

    run_timed(state, d.copies, kv_bytes_per_set(context, batch, layout), [&](int copy, cudaStream_t stream) {
        const int32_t* row_seq = d.row_seq.data() + static_cast<ptrdiff_t>(copy) * batch;
        if (layout == kContiguous) {
            c.row_seq = row_seq;
            contiguous_attention(c, d.tiles.data(), d.n_tiles, d.partitions, d.workspace.data(), stream);
        } else {
            p.row_seq = row_seq;
            paged_attention(p, d.tiles.data(), d.n_tiles, d.partitions, d.workspace.data(), stream);
        }
    });
    state.counters["partitions"] = d.partitions.n_partitions;
}

}  // namespace

void register_attention_benchmarks() {
    benchmark::internal::Benchmark* b =
        register_cuda_benchmark("cuda_decode_attention/llama_1b", decode_attention, {"context", "batch", "block", "layout"});
    for (int64_t context : {1024, 2048, 4096, 8192, 16384, 32768})
        for (int64_t batch : {1, 8})
            for (int64_t layout : {kContiguous, kPagedF32, kPagedF16}) b->Args({context, batch, kBlockSize, layout});
}

}  // namespace kvx::cuda::bench
