// Decode attention benchmarks: paged_attention (fp32 and fp16 KV, the blocks of every sequence shuffled over
// the pool as a long-running server leaves them) against contiguous_attention (fp32, one region per
// sequence, ONNX Runtime GenAI's layout), one query row per sequence at the end of a `context`-long history.
//
// Each benchmark takes the layout as its last argument, so that the contiguous run and the paged runs of
// one size follow each other and see the same machine load (other work comes and goes):
//   layout 0: contiguous fp32,  1: paged fp32,  2: paged fp16
// The goal the sweep checks (tools/kvx_tools/bench/kernel_summary.py): paged within 10% of contiguous at every context.
//
// frac_of_read_same_size: GB/s over the best read loop's rate on a buffer of the case's own K and V bytes, read
// again and again as the benchmark reads its cache. The machine's read ceiling (frac_of_read_bw) is a DRAM
// figure, and a case that fits the L3 (SmolLM2's one layer at 8k is 12.6 MB; some servers' L3 is 300 MB) beat
// it by up to 12%: only a ceiling of the same size says how far from the memory system's rate the kernel is.
#include <map>
#include <cmath>
#include <numeric>
#include <span>
#include <random>
#include <tuple>
#include <vector>

#include "cpu/backend/huge_page_buffer.h"
#include "tools/bench/support/bench_support.h"
#include "tools/bench/support/stream_read.h"

namespace kvx::bench {
namespace {

enum Layout : int64_t { kContiguous = 0, kPagedF32 = 1, kPagedF16 = 2 };

struct AttentionShape {
    int n_heads;
    int n_kv_heads;
    int head_dim;
};
constexpr AttentionShape kSmolLM2{9, 3, 64};  // SmolLM2-135M
constexpr AttentionShape kLlama1B{32, 8, 64};  // Llama 3.2 1B

// Sequences x context stays at or below 256k tokens: SmolLM2's fp32 K and V are then 384 MiB per layout,
// under 1 GiB for all three together.
constexpr int64_t kMaxTokens = int64_t{1} << 18;

// Caches on huge pages, as CpuBackend keeps its pool (and as a contiguous engine would want its regions).
template <class T>
struct HugePageArray {
    cpu::HugePageBuffer memory;
    std::span<T> view() { return {reinterpret_cast<T*>(memory.data()), memory.size() / sizeof(T)}; }
    T* data() { return view().data(); }
    void resize(size_t n) { memory = cpu::HugePageBuffer(n * sizeof(T)); }
};

struct AttentionData {
    // All caches hold `batch` sequences of `context` positions, one layer.
    HugePageArray<float> k_contiguous, v_contiguous;   // [batch][n_kv_heads][context][head_dim]
    HugePageArray<float> k_paged, v_paged;             // [batch * blocks_per_seq][n_kv_heads][block_size][head_dim]
    HugePageArray<uint16_t> k_paged_f16, v_paged_f16;  // as k_paged, fp16 bits
    std::vector<int32_t> block_tables;                 // [batch][blocks_per_seq], a permutation of the pool
    std::vector<float> q;                              // [batch][n_heads][head_dim]
    std::vector<float> out;                            // [batch][n_heads][head_dim]
    std::vector<int32_t> row_seq, row_pos;             // [batch]: row r is sequence r at position context - 1
};

AttentionData make_data(const AttentionShape& shape, int context, int batch, int block_size, Layout layout) {
    AttentionData d;
    const int blocks_per_seq = (context + block_size - 1) / block_size;
    const size_t row = static_cast<size_t>(shape.n_kv_heads) * static_cast<size_t>(shape.head_dim);
    const size_t contiguous = static_cast<size_t>(batch) * static_cast<size_t>(context) * row;
    const size_t paged = static_cast<size_t>(batch) * static_cast<size_t>(blocks_per_seq * block_size) * row;
    if (layout == kContiguous) {
        d.k_contiguous.resize(contiguous);
        d.v_contiguous.resize(contiguous);
        fill_random(d.k_contiguous.view(), 1);
        fill_random(d.v_contiguous.view(), 2);
    } else if (layout == kPagedF32) {
        d.k_paged.resize(paged);
        d.v_paged.resize(paged);
        fill_random(d.k_paged.view(), 1);
        fill_random(d.v_paged.view(), 2);
    } else {
        d.k_paged_f16.resize(paged);
        d.v_paged_f16.resize(paged);
        fill_random_f16(d.k_paged_f16.view(), 1);
        fill_random_f16(d.v_paged_f16.view(), 2);
    }
    d.block_tables.resize(static_cast<size_t>(batch * blocks_per_seq));
    std::iota(d.block_tables.begin(), d.block_tables.end(), 0);
    std::shuffle(d.block_tables.begin(), d.block_tables.end(), std::mt19937(3));
    d.q.resize(static_cast<size_t>(batch * shape.n_heads * shape.head_dim));
    fill_random(d.q, 4);
    d.out.resize(d.q.size());
    d.row_seq.resize(static_cast<size_t>(batch));
    std::iota(d.row_seq.begin(), d.row_seq.end(), 0);
    d.row_pos.assign(static_cast<size_t>(batch), context - 1);
    return d;
}

// The fields paged and contiguous attention share: query rows, their sequences and positions, heads.
template <class Args>
Args rows_and_heads(AttentionData& d, const AttentionShape& shape, int batch) {
    Args a;
    a.q = d.q.data();
    a.row_seq = d.row_seq.data();
    a.row_pos = d.row_pos.data();
    a.out = d.out.data();
    a.n_rows = batch;
    a.n_heads = shape.n_heads;
    a.n_kv_heads = shape.n_kv_heads;
    a.head_dim = shape.head_dim;
    a.scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
    return a;
}

// The best read rate, GB/s, over a buffer of `bytes` on `threads` threads: every read loop, 5 passes each after a
// pass that brings the buffer into whatever cache holds it. Measured once per size and thread count.
double same_size_read_gbps(size_t bytes, int threads) {
    static std::map<std::pair<size_t, int>, double> measured;
    const auto key = std::make_pair(bytes, threads);
    if (const auto found = measured.find(key); found != measured.end()) return found->second;
    const StreamBuffer buffer(bytes);
    measure_read_bandwidth(buffer, threads, 1, supported_read_loops().back());
    return measured[key] = measure_read_ceiling(buffer, threads, 5).best_gbps;
}

// Arguments: threads, context, batch, block, layout.
void decode_attention(benchmark::State& state, AttentionShape shape) {
    const int threads = use_threads(state);
    const int context = static_cast<int>(state.range(1));
    const int batch = static_cast<int>(state.range(2));
    const int block_size = static_cast<int>(state.range(3));
    const auto layout = static_cast<Layout>(state.range(4));
    // The contiguous layout ignores the block size: its data is kept across the block sweep.
    const int data_block = layout == kContiguous ? 0 : block_size;
    const auto key = std::make_tuple(shape.n_heads, shape.n_kv_heads, shape.head_dim, context, batch, data_block,
                                     static_cast<int>(layout));
    AttentionData& d = reuse_or_make<AttentionData>(
        key, [&] { return make_data(shape, context, batch, block_size, layout); });
    const KernelTable& kernels = kernels_under_test();
    const BaselineKernelTable& baselines = baseline_kernels_under_test();

    ContiguousAttentionArgs c = rows_and_heads<ContiguousAttentionArgs>(d, shape, batch);
    c.k_cache = d.k_contiguous.data();
    c.v_cache = d.v_contiguous.data();
    c.max_seq = context;

    PagedAttentionArgs p = rows_and_heads<PagedAttentionArgs>(d, shape, batch);
    p.block_tables = d.block_tables.data();
    p.block_size = block_size;
    p.table_stride = (context + block_size - 1) / block_size;
    p.kv_dtype = layout == kPagedF16 ? KvDtype::f16 : KvDtype::f32;
    p.k_cache = layout == kPagedF16 ? static_cast<const void*>(d.k_paged_f16.data()) : d.k_paged.data();
    p.v_cache = layout == kPagedF16 ? static_cast<const void*>(d.v_paged_f16.data()) : d.v_paged.data();

    for (auto _ : state) {
        if (layout == kContiguous) {
            baselines.contiguous_attention(c);
        } else {
            kernels.paged_attention(p);
        }
        benchmark::DoNotOptimize(d.out.data());
        benchmark::ClobberMemory();
    }
    // Every K and V row of every sequence is read once from memory (the query heads of a GQA group re-read
    // it from the cache); q is read and out written once. Per (row, head, position): a dot product and a
    // multiply-add of head_dim elements (the softmax's exponentials are not counted).
    const double kv_elem_bytes = layout == kPagedF16 ? 2.0 : 4.0;
    const double positions = static_cast<double>(batch) * context;
    const double qo_bytes = 2.0 * batch * shape.n_heads * shape.head_dim * 4.0;
    const double bytes = 2.0 * positions * shape.n_kv_heads * shape.head_dim * kv_elem_bytes + qo_bytes;
    const double flops = 4.0 * positions * shape.n_heads * shape.head_dim;
    report_per_call(state, bytes, flops);
    const double same_size = same_size_read_gbps(static_cast<size_t>(bytes - qo_bytes), threads);
    state.counters["frac_of_read_same_size"] =
        benchmark::Counter(bytes / (same_size * 1e9), benchmark::Counter::kIsIterationInvariantRate);
}

bool within_memory(const std::vector<int64_t>& args) { return args[1] * args[2] <= kMaxTokens; }

const std::vector<int64_t> kLayouts = {kContiguous, kPagedF32, kPagedF16};
const std::vector<int64_t> kContexts = {128, 512, 1024, 2048, 4096, 8192, 16384, 32768};
const std::vector<const char*> kArgNames = {"threads", "context", "batch", "block", "layout"};

// Every context at batches 1, 8, 64, block size 16 (the engine's default).
void context_sweep(benchmark::internal::Benchmark* b) {
    sweep(b, kArgNames, {thread_counts(), kContexts, {1, 8, 64}, {16}, kLayouts}, within_memory);
}

// Block sizes 8 .. 64 at a short and a long context.
void block_sweep(benchmark::internal::Benchmark* b) {
    sweep(b, kArgNames, {thread_counts(), {1024, 8192}, {1, 8}, {8, 16, 32, 64}, kLayouts});
}

// A 1B-class model's wider attention (32 query heads, 8 KV heads), one sequence.
void llama_1b_sweep(benchmark::internal::Benchmark* b) {
    sweep(b, kArgNames, {thread_counts(), kContexts, {1}, {16}, kLayouts});
}

BENCHMARK_CAPTURE(decode_attention, smollm2, kSmolLM2)->Apply(context_sweep);
BENCHMARK_CAPTURE(decode_attention, smollm2_blocks, kSmolLM2)->Apply(block_sweep);
BENCHMARK_CAPTURE(decode_attention, llama_1b, kLlama1B)->Apply(llama_1b_sweep);

}  // namespace
}  // namespace kvx::bench
