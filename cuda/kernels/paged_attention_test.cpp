// cuda/kernels/paged_attention.cu and cuda/kernels/attention_plan.cpp beyond what the kernel ops harness checks
// (tests/kernel_ops/: every head dim, block size, GQA ratio, window, soft-cap and KV dtype, planned as the backend
// plans): the planners' invariants, partition counts forced past the plan, rows of a sequence apart, caches off
// alignment, the argument checks, and the contiguous-cache kernel; random queries and caches, shuffled physical
// blocks, poisoned outputs and workspaces.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "cuda/kernels/cuda_kernels.h"
#include "cuda/kernels/test_support.h"
#include "kernels/baseline_kernels.h"
#include "kernels/error.h"
#include "kernels/kernels.h"

namespace kvx::cuda {
namespace {

using test::kFp32Tolerance;
using test::poisoned;
using test::random_floats;
using test::relative_error;
using test::to_device;
using test::to_host;

constexpr int kMaxPartitions = 64;  // the workspace capacity the planned launches assume

int first_visible(int pos, int window) { return window > 0 ? std::max(0, pos - window + 1) : 0; }
int round_up(int x, int to) { return (x + to - 1) / to * to; }

int sm_count() {
    int count = 0;
    check(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, 0), "cudaDeviceGetAttribute");
    return count;
}

// What a batch looks like: sequence s holds lengths[s] cached positions, and its rows are its last rows_of[s]
// positions (1: a decode row; more: a prefill chunk appended after the lengths[s] - rows_of[s] positions
// cached before it). Rows go sequence by sequence, sequence 1 first (so a prefill chunk of sequence 0 sits
// between decode rows), or round robin over the sequences when interleaved (one sequence's rows apart).
struct BatchShape {
    int n_heads = 8;
    int n_kv_heads = 2;
    int head_dim = 64;
    int block_size = 16;
    std::vector<int> lengths;  // [n_seqs]
    std::vector<int> rows_of;  // [n_seqs]
    int window = 0;
    bool interleaved = false;
    float softcap = 0.0f;  // paged attention's logit soft-cap (Gemma 2); 0: none
};

// The batch's host data. Physical blocks are shuffled and a few never referenced; table entries past a
// sequence's end are -1. With a window, positions no row sees hold NaN and the table entries of blocks wholly
// before every row's window are -1 (released), so reading them fails the comparison.
struct PagedBatch {
    BatchShape shape;
    int table_stride = 0;
    std::vector<float> q;            // [n_rows][n_heads][head_dim]
    std::vector<float> k_cache;      // [num_blocks][n_kv_heads][block_size][head_dim]
    std::vector<float> v_cache;      // [num_blocks][n_kv_heads][block_size][head_dim]
    std::vector<uint16_t> k_f16;     // k_cache as fp16 bits
    std::vector<uint16_t> v_f16;     // v_cache as fp16 bits
    std::vector<int32_t> tables;     // [n_seqs][table_stride]
    std::vector<int32_t> row_seq;    // [n_rows]
    std::vector<int32_t> row_pos;    // [n_rows]

    int n_rows() const { return static_cast<int>(row_seq.size()); }
    int n_seqs() const { return static_cast<int>(shape.lengths.size()); }
    int group() const { return shape.n_heads / shape.n_kv_heads; }
    size_t row_elems() const { return static_cast<size_t>(shape.head_dim); }
    int32_t& table(int s, int b) { return tables[static_cast<size_t>(s * table_stride + b)]; }
    int32_t table(int s, int b) const { return tables[static_cast<size_t>(s * table_stride + b)]; }
    // Element offset of position p of sequence s for KV head h, or -1 where its block is released.
    int64_t cache_offset(int s, int h, int p) const {
        const int64_t block = table(s, p / shape.block_size);
        if (block < 0) return -1;
        return ((block * shape.n_kv_heads + h) * shape.block_size + p % shape.block_size) * shape.head_dim;
    }
};

PagedBatch make_batch(const BatchShape& shape, uint32_t seed) {
    PagedBatch b;
    b.shape = shape;
    std::mt19937 rng(seed);
    const int n_seqs = b.n_seqs();
    std::vector<int> blocks_of(static_cast<size_t>(n_seqs));
    int used_blocks = 0;
    for (int s = 0; s < n_seqs; ++s) {
        blocks_of[static_cast<size_t>(s)] = (shape.lengths[static_cast<size_t>(s)] + shape.block_size - 1) / shape.block_size;
        used_blocks += blocks_of[static_cast<size_t>(s)];
        b.table_stride = std::max(b.table_stride, blocks_of[static_cast<size_t>(s)] + 2);
    }
    const int num_blocks = used_blocks + 3;
    std::vector<int32_t> physical(static_cast<size_t>(num_blocks));  // [num_blocks], shuffled block ids
    std::iota(physical.begin(), physical.end(), 0);
    std::shuffle(physical.begin(), physical.end(), rng);
    b.tables.assign(static_cast<size_t>(n_seqs * b.table_stride), -1);
    size_t next = 0;
    for (int s = 0; s < n_seqs; ++s)
        for (int blk = 0; blk < blocks_of[static_cast<size_t>(s)]; ++blk) b.table(s, blk) = physical[next++];

    std::vector<int> order(static_cast<size_t>(n_seqs));  // sequences in row order
    std::iota(order.begin(), order.end(), 0);
    if (n_seqs > 1) std::swap(order[0], order[1]);
    std::vector<int> emitted(static_cast<size_t>(n_seqs), 0);
    for (bool any = true; any;) {
        any = false;
        for (int s : order) {
            const size_t si = static_cast<size_t>(s);
            const int take = shape.interleaved ? std::min(1, shape.rows_of[si] - emitted[si]) : shape.rows_of[si] - emitted[si];
            for (int r = 0; r < take; ++r) {
                b.row_seq.push_back(s);
                b.row_pos.push_back(shape.lengths[si] - shape.rows_of[si] + emitted[si]++);
                any = true;
            }
        }
    }

    const size_t cache_size = static_cast<size_t>(num_blocks) * static_cast<size_t>(shape.n_kv_heads * shape.block_size) * b.row_elems();
    b.k_cache = random_floats(cache_size, seed + 1);
    b.v_cache = random_floats(cache_size, seed + 2);
    // Large queries make the softmax peaky, so that the running maximum really moves.
    b.q = random_floats(static_cast<size_t>(b.n_rows() * shape.n_heads) * b.row_elems(), seed + 3, -4.0f, 4.0f);

    if (shape.window > 0) {
        const float nan = std::numeric_limits<float>::quiet_NaN();
        for (int s = 0; s < n_seqs; ++s) {
            int first_seen = shape.lengths[static_cast<size_t>(s)];
            for (int r = 0; r < b.n_rows(); ++r)
                if (b.row_seq[static_cast<size_t>(r)] == s)
                    first_seen = std::min(first_seen, first_visible(b.row_pos[static_cast<size_t>(r)], shape.window));
            for (int p = 0; p < first_seen; ++p) {
                for (int h = 0; h < shape.n_kv_heads; ++h) {
                    const int64_t at = b.cache_offset(s, h, p);
                    if (at < 0) continue;
                    std::fill_n(b.k_cache.begin() + at, shape.head_dim, nan);
                    std::fill_n(b.v_cache.begin() + at, shape.head_dim, nan);
                }
                if (p % shape.block_size == shape.block_size - 1) b.table(s, p / shape.block_size) = -1;
            }
        }
    }
    b.k_f16 = test::to_f16(b.k_cache);
    b.v_f16 = test::to_f16(b.v_cache);
    return b;
}

// How the device runs a batch: KV dtype, partitions (0: planned; otherwise that many, of partition_tokens
// keys, 0: enough to cover the longest tile span) and whether the caches start off a 16-byte boundary.
struct Launch {
    KvDtype dtype = KvDtype::f32;
    int n_partitions = 0;
    int partition_tokens = 0;
    bool misaligned = false;
};

// The longest key range of any tile: what plan_attention_partitions needs.
int longest_span(const std::vector<AttentionTile>& tiles, const std::vector<int32_t>& row_pos, int window) {
    int longest = 0;
    for (const AttentionTile& t : tiles) {
        int begin = std::numeric_limits<int>::max(), end = 0;
        for (int r = t.row_begin; r < t.row_begin + t.n_rows; ++r) {
            begin = std::min(begin, first_visible(row_pos[static_cast<size_t>(r)], window));
            end = std::max(end, row_pos[static_cast<size_t>(r)]);
        }
        longest = std::max(longest, end - begin + 1);
    }
    return longest;
}

AttentionPartitions partitions_for(const Launch& how, const std::vector<AttentionTile>& tiles, int n_kv_heads,
                                   int max_span) {
    if (how.n_partitions == 0)
        return plan_attention_partitions(static_cast<int>(tiles.size()), n_kv_heads, max_span, sm_count(), kMaxPartitions);
    const int tokens = how.partition_tokens > 0
                           ? how.partition_tokens
                           : round_up((max_span + how.n_partitions - 1) / how.n_partitions, kKeyChunk);
    return {how.n_partitions, tokens};
}

// host on the device, `offset` elements past the buffer's start (the pointer to use is data() + offset).
template <class T>
DeviceBuffer<T> upload_at(const std::vector<T>& host, int offset) {
    std::vector<T> shifted(static_cast<size_t>(offset), T{});
    shifted.insert(shifted.end(), host.begin(), host.end());
    return to_device(shifted);
}

// Runs fn(tiles, n_tiles, partitions, workspace, out) on the batch's rows and returns out, after poisoning
// out and the workspace.
template <class Run>
std::vector<float> run_tiled(const PagedBatch& b, const Launch& how, Run run) {
    const std::vector<AttentionTile> tiles = plan_attention_tiles(b.row_seq, b.group());
    const AttentionPartitions partitions =
        partitions_for(how, tiles, b.shape.n_kv_heads, longest_span(tiles, b.row_pos, b.shape.window));
    DeviceBuffer<AttentionTile> device_tiles = to_device(tiles);
    DeviceBuffer<float> workspace = poisoned<float>(
        attention_workspace_floats(b.n_rows(), b.shape.n_heads, b.shape.head_dim, partitions.n_partitions));
    DeviceBuffer<float> out = poisoned<float>(b.q.size());
    run(device_tiles.data(), static_cast<int>(tiles.size()), partitions, workspace.data(), out.data());
    check(cudaGetLastError(), "attention kernels");
    return to_host(out);
}

// The fields PagedAttentionArgs and ContiguousAttentionArgs share, from the batch.
template <class Args>
Args attention_args(const PagedBatch& b) {
    Args args;
    args.n_rows = b.n_rows();
    args.n_heads = b.shape.n_heads;
    args.n_kv_heads = b.shape.n_kv_heads;
    args.head_dim = b.shape.head_dim;
    args.window = b.shape.window;
    args.scale = 1.0f / std::sqrt(static_cast<float>(b.shape.head_dim));
    return args;
}

PagedAttentionArgs paged_args(const PagedBatch& b, KvDtype dtype) {
    PagedAttentionArgs args = attention_args<PagedAttentionArgs>(b);
    args.softcap = b.shape.softcap;
    args.block_size = b.shape.block_size;
    args.table_stride = b.table_stride;
    args.kv_dtype = dtype;
    return args;
}

std::vector<float> reference_paged(const PagedBatch& b, KvDtype dtype) {
    std::vector<float> out(b.q.size(), std::numeric_limits<float>::quiet_NaN());
    PagedAttentionArgs args = paged_args(b, dtype);
    args.q = b.q.data();
    args.k_cache = dtype == KvDtype::f16 ? static_cast<const void*>(b.k_f16.data()) : b.k_cache.data();
    args.v_cache = dtype == KvDtype::f16 ? static_cast<const void*>(b.v_f16.data()) : b.v_cache.data();
    args.block_tables = b.tables.data();
    args.row_seq = b.row_seq.data();
    args.row_pos = b.row_pos.data();
    args.out = out.data();
    reference_kernels().paged_attention(args);
    return out;
}

std::vector<float> device_paged(const PagedBatch& b, const Launch& how) {
    const int offset = how.misaligned ? 1 : 0;
    DeviceBuffer<float> k32, v32;
    DeviceBuffer<uint16_t> k16, v16;
    PagedAttentionArgs args = paged_args(b, how.dtype);
    if (how.dtype == KvDtype::f16) {
        k16 = upload_at(b.k_f16, offset);
        v16 = upload_at(b.v_f16, offset);
        args.k_cache = k16.data() + offset;
        args.v_cache = v16.data() + offset;
    } else {
        k32 = upload_at(b.k_cache, offset);
        v32 = upload_at(b.v_cache, offset);
        args.k_cache = k32.data() + offset;
        args.v_cache = v32.data() + offset;
    }
    DeviceBuffer<float> q = to_device(b.q);
    DeviceBuffer<int32_t> tables = to_device(b.tables), row_seq = to_device(b.row_seq), row_pos = to_device(b.row_pos);
    args.q = q.data();
    args.block_tables = tables.data();
    args.row_seq = row_seq.data();
    args.row_pos = row_pos.data();
    return run_tiled(b, how, [&](const AttentionTile* tiles, int n_tiles, const AttentionPartitions& partitions,
                                 float* workspace, float* out) {
        args.out = out;
        paged_attention(args, tiles, n_tiles, partitions, workspace, cudaStream_t{});
    });
}

// Runs the batch on the device and the reference and checks they agree. The reference reads the same fp16
// values (widened exactly), so fp16 caches meet the fp32 tolerance too.
void check_paged(const PagedBatch& b, const Launch& how) {
    const double error = relative_error(device_paged(b, how), reference_paged(b, how.dtype));
    INFO("relative error " << error);
    CHECK(error < kFp32Tolerance);
}

// ---- Planning ----

TEST_CASE("paged attention tiles cover every row and head exactly once", "[cuda][attention]") {
    const std::vector<std::vector<int32_t>> batches = {
        {},
        {0},
        std::vector<int32_t>(37, 2),                                    // a prefill chunk
        {3, 3, 1, 1, 1, 0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2},  // chunks and decode rows
        {0, 1, 0, 1, 0, 1},                                             // one sequence's rows apart
    };
    for (const std::vector<int32_t>& row_seq : batches) {
        for (int group : {1, 2, 3, 4, 5, 8, 9, 16, 17, 32, 40}) {
            INFO("rows " << row_seq.size() << " group " << group);
            const std::vector<AttentionTile> tiles = plan_attention_tiles(row_seq, group);
            std::vector<int> covered(row_seq.size() * static_cast<size_t>(group), 0);  // [n_rows][group]
            for (const AttentionTile& t : tiles) {
                REQUIRE(t.n_rows >= 1);
                REQUIRE(t.n_heads >= 1);
                REQUIRE(t.n_rows * t.n_heads <= kTileQueries);
                REQUIRE(t.row_begin >= 0);
                REQUIRE(static_cast<size_t>(t.row_begin + t.n_rows) <= row_seq.size());
                REQUIRE(t.head_begin >= 0);
                REQUIRE(t.head_begin + t.n_heads <= group);
                for (int r = t.row_begin; r < t.row_begin + t.n_rows; ++r) {
                    CHECK(row_seq[static_cast<size_t>(r)] == row_seq[static_cast<size_t>(t.row_begin)]);
                    for (int h = t.head_begin; h < t.head_begin + t.n_heads; ++h)
                        ++covered[static_cast<size_t>(r * group + h)];
                }
            }
            CHECK(std::all_of(covered.begin(), covered.end(), [](int c) { return c == 1; }));
            // Consecutive rows of a sequence share tiles: as few tiles as kTileQueries allows.
            size_t expected = 0;
            for (size_t r = 0; r < row_seq.size();) {
                size_t end = r + 1;
                while (end < row_seq.size() && row_seq[end] == row_seq[r]) ++end;
                const size_t run = end - r;
                expected += group <= kTileQueries
                                ? (run + static_cast<size_t>(kTileQueries / group) - 1) / static_cast<size_t>(kTileQueries / group)
                                : run * static_cast<size_t>((group + kTileQueries - 1) / kTileQueries);
                r = end;
            }
            CHECK(tiles.size() == expected);
        }
    }
    CHECK_THROWS_AS(plan_attention_tiles(std::vector<int32_t>{0}, 0), Error);
}

TEST_CASE("paged attention partitions cover the longest span in whole chunks and fill the device", "[cuda][attention]") {
    for (int n_tiles : {0, 1, 3, 40, 1000}) {
        for (int n_kv_heads : {1, 8}) {
            for (int max_span : {0, 1, 31, 32, 33, 256, 257, 1000, 3000, 8192, 100000}) {
                for (int max_partitions : {1, 3, 16, 64}) {
                    const int sms = 132;
                    INFO("tiles " << n_tiles << " kv heads " << n_kv_heads << " span " << max_span << " max "
                                  << max_partitions);
                    const AttentionPartitions p =
                        plan_attention_partitions(n_tiles, n_kv_heads, max_span, sms, max_partitions);
                    CHECK(p.n_partitions >= 1);
                    CHECK(p.n_partitions <= max_partitions);
                    CHECK(p.partition_tokens > 0);
                    CHECK(p.partition_tokens % kKeyChunk == 0);
                    CHECK(int64_t{p.n_partitions} * p.partition_tokens >= max_span);
                    CHECK(int64_t{p.n_partitions - 1} * p.partition_tokens < std::max(max_span, 1));  // none empty
                    // Pieces of about 256 keys at least, and no more than needed to fill the device twice.
                    CHECK(p.n_partitions <= std::max(1, (max_span + 255) / 256));
                    if (p.n_partitions > 1) CHECK(int64_t{n_tiles} * n_kv_heads * (p.n_partitions - 1) < 2 * sms);
                }
            }
        }
    }
    // One 8k decode row over 8 KV heads on 132 SMs: 33 pieces fill the device twice, capped at 8192 / 256.
    const AttentionPartitions decode = plan_attention_partitions(1, 8, 8192, 132, 64);
    CHECK(decode.n_partitions == 32);
    CHECK(decode.partition_tokens == 256);
    const AttentionPartitions capped = plan_attention_partitions(1, 8, 8192, 132, 16);
    CHECK(capped.n_partitions == 16);
    CHECK(capped.partition_tokens == 512);
    CHECK(plan_attention_partitions(100, 8, 8192, 132, 64).n_partitions == 1);  // the batch fills the device

    CHECK(attention_workspace_floats(5, 8, 64, 1) == 0);
    CHECK(attention_workspace_floats(5, 8, 64, 3) == size_t{5} * 8 * 3 * (64 + 2));
    CHECK_THROWS_AS(plan_attention_partitions(1, 0, 100, 132, 64), Error);
    CHECK_THROWS_AS(plan_attention_partitions(1, 1, 100, 132, 0), Error);
    CHECK_THROWS_AS(attention_workspace_floats(1, 1, 64, 0), Error);
}

// ---- Paged attention ----

TEST_CASE("paged attention of a prefill chunk appended to a cache and batched with decode rows", "[cuda][attention]") {
    uint32_t seed = 300;
    for (auto [n_heads, n_kv_heads] : {std::pair{2, 2}, {9, 3}, {8, 2}}) {
        for (int block_size : {1, 16, 64}) {
            INFO("heads " << n_heads << "/" << n_kv_heads << " block_size " << block_size);
            // Sequence 0: positions 45 .. 84 are the chunk, after 45 cached ones; more rows than one tile holds.
            BatchShape shape{.n_heads = n_heads, .n_kv_heads = n_kv_heads, .head_dim = 64, .block_size = block_size,
                             .lengths = {85, 20, 130}, .rows_of = {40, 1, 1}};
            const PagedBatch batch = make_batch(shape, ++seed);
            REQUIRE(batch.row_pos[1] == 45);
            check_paged(batch, {});
            check_paged(batch, {.dtype = KvDtype::f16, .n_partitions = 2});
            // Two chunks whose rows alternate: every tile holds one row.
            shape.rows_of = {30, 20, 1};
            shape.interleaved = true;
            check_paged(make_batch(shape, ++seed), {});
        }
    }
}

TEST_CASE("paged attention splits long contexts into partitions whose merge matches the reference",
          "[cuda][attention]") {
    uint32_t seed = 500;
    for (KvDtype dtype : {KvDtype::f32, KvDtype::f16}) {
        // One long decode row beside short ones: at 3 partitions the 17-key row's last two are empty.
        BatchShape shape{.head_dim = 128, .lengths = {3000, 17, 700}, .rows_of = {1, 1, 1}};
        const PagedBatch batch = make_batch(shape, ++seed);
        const std::vector<float> want = reference_paged(batch, dtype);
        // 64-key partitions: the plan was made for a shorter span, so the last partition takes the rest.
        for (auto [n, tokens] : {std::pair{1, 0}, {3, 0}, {0, 0}, {5, 64}, {40, 32}}) {
            INFO("f16 " << (dtype == KvDtype::f16) << " partitions " << n << " tokens " << tokens);
            const double error = relative_error(device_paged(batch, {.dtype = dtype, .n_partitions = n, .partition_tokens = tokens}), want);
            INFO("relative error " << error);
            CHECK(error < kFp32Tolerance);
        }
    }
    // A windowed prefill chunk: the tile's rows see different ranges, so a partition is partly masked per query.
    BatchShape windowed{.head_dim = 80, .lengths = {2000, 1500}, .rows_of = {20, 1}, .window = 500};
    const PagedBatch chunk = make_batch(windowed, ++seed);
    check_paged(chunk, {.n_partitions = 3});
    check_paged(chunk, {});
    // MQA over 3000 keys: heads split across tiles and keys across partitions.
    BatchShape mqa{.n_heads = 32, .n_kv_heads = 1, .lengths = {3000, 40}, .rows_of = {1, 1}};
    const PagedBatch wide = make_batch(mqa, ++seed);
    check_paged(wide, {.n_partitions = 3});
    check_paged(wide, {.dtype = KvDtype::f16});
}

TEST_CASE("paged attention with a logit soft-cap differs from uncapped attention", "[cuda][attention][softcap]") {
    SECTION("the cap changes the result, so the harness's comparison sees it") {
        BatchShape shape{.head_dim = 64, .lengths = {150, 65}, .rows_of = {3, 1}, .softcap = 0.5f};
        const PagedBatch capped = make_batch(shape, 599);
        PagedBatch uncapped = capped;
        uncapped.shape.softcap = 0.0f;
        CHECK(relative_error(device_paged(capped, {}), reference_paged(uncapped, KvDtype::f32)) > 1e-2);
    }
}

TEST_CASE("paged attention takes scalar loads for caches off 16-byte alignment", "[cuda][attention]") {
    uint32_t seed = 600;
    for (KvDtype dtype : {KvDtype::f32, KvDtype::f16}) {
        INFO("misaligned, f16 " << (dtype == KvDtype::f16));
        BatchShape shape{.lengths = {70, 3, 200}, .rows_of = {9, 1, 1}};
        check_paged(make_batch(shape, ++seed), {.dtype = dtype, .misaligned = true});
    }
}

TEST_CASE("paged attention rejects bad arguments with an error naming the problem", "[cuda][attention]") {
    PagedAttentionArgs args;
    args.n_rows = 1;
    args.n_heads = 8;
    args.n_kv_heads = 2;
    args.head_dim = 64;
    args.block_size = 16;
    const AttentionPartitions one{1, 0}, two{2, 64};
    float* no_workspace = nullptr;
    auto launch = [&](const AttentionPartitions& p, float* workspace) {
        paged_attention(args, nullptr, 1, p, workspace, cudaStream_t{});
    };
    for (int head_dim : {0, -1, kMaxHeadDim + 1}) {
        args.head_dim = head_dim;
        CHECK_THROWS_WITH(launch(one, no_workspace), Catch::Contains("head_dim"));
    }
    args.head_dim = 64;
    args.n_heads = 6;
    args.n_kv_heads = 4;
    CHECK_THROWS_WITH(launch(one, no_workspace), Catch::Contains("n_kv_heads"));
    args.n_heads = 8;
    args.n_kv_heads = 2;
    CHECK_THROWS_WITH(launch({0, 32}, no_workspace), Catch::Contains("n_partitions"));
    DeviceBuffer<float> workspace(attention_workspace_floats(1, 8, 64, 2));
    for (int tokens : {0, 48, -32})
        CHECK_THROWS_WITH(launch({2, tokens}, workspace.data()), Catch::Contains("partition_tokens"));
    CHECK_THROWS_WITH(launch(two, no_workspace), Catch::Contains("workspace"));
    args.block_size = 0;
    CHECK_THROWS_WITH(launch(one, no_workspace), Catch::Contains("block_size"));
    args.block_size = 16;
    for (float cap : {-1.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
        args.softcap = cap;
        CHECK_THROWS_WITH(launch(one, no_workspace), Catch::Contains("softcap"));
    }
}

// ---- Contiguous attention ----

// The batch's cache rewritten as one region per sequence, [n_seqs][n_kv_heads][max_seq][head_dim], NaN where
// the paged cache holds nothing (past a sequence's end, released blocks).
std::vector<float> contiguous_copy(const PagedBatch& b, const std::vector<float>& paged, int max_seq) {
    const size_t row = b.row_elems();
    std::vector<float> region(static_cast<size_t>(b.n_seqs() * b.shape.n_kv_heads * max_seq) * row,
                              std::numeric_limits<float>::quiet_NaN());
    for (int s = 0; s < b.n_seqs(); ++s)
        for (int h = 0; h < b.shape.n_kv_heads; ++h)
            for (int p = 0; p < b.shape.lengths[static_cast<size_t>(s)]; ++p) {
                const int64_t from = b.cache_offset(s, h, p);
                if (from < 0) continue;
                const size_t to = static_cast<size_t>((s * b.shape.n_kv_heads + h) * max_seq + p) * row;
                std::copy_n(paged.begin() + from, row, region.begin() + static_cast<std::ptrdiff_t>(to));
            }
    return region;
}

TEST_CASE("contiguous attention matches the reference with and without partitions and the paged kernel bit for bit",
          "[cuda][attention]") {
    uint32_t seed = 700;
    for (auto [n_heads, n_kv_heads] : {std::pair{2, 2}, {8, 2}}) {
        for (int window : {0, 40}) {
            INFO("heads " << n_heads << "/" << n_kv_heads << " window " << window);
            BatchShape shape{.n_heads = n_heads, .n_kv_heads = n_kv_heads, .head_dim = 80,
                             .lengths = {150, 1, 67, 600}, .rows_of = {5, 1, 1, 1}, .window = window};
            const PagedBatch batch = make_batch(shape, ++seed);
            const int max_seq = 601;
            const std::vector<float> k = contiguous_copy(batch, batch.k_cache, max_seq);  // [n_seqs][n_kv_heads][max_seq][head_dim]
            const std::vector<float> v = contiguous_copy(batch, batch.v_cache, max_seq);  // [n_seqs][n_kv_heads][max_seq][head_dim]

            std::vector<float> want(batch.q.size(), std::numeric_limits<float>::quiet_NaN());
            ContiguousAttentionArgs args = attention_args<ContiguousAttentionArgs>(batch);
            args.max_seq = max_seq;
            args.q = batch.q.data();
            args.k_cache = k.data();
            args.v_cache = v.data();
            args.row_seq = batch.row_seq.data();
            args.row_pos = batch.row_pos.data();
            args.out = want.data();
            reference_baseline_kernels().contiguous_attention(args);

            DeviceBuffer<float> q = to_device(batch.q), k_device = to_device(k), v_device = to_device(v);
            DeviceBuffer<int32_t> row_seq = to_device(batch.row_seq), row_pos = to_device(batch.row_pos);
            args.q = q.data();
            args.k_cache = k_device.data();
            args.v_cache = v_device.data();
            args.row_seq = row_seq.data();
            args.row_pos = row_pos.data();
            for (int n_partitions : {1, 3, 0}) {
                INFO("partitions " << n_partitions);
                const Launch how{.n_partitions = n_partitions};
                const std::vector<float> got = run_tiled(
                    batch, how, [&](const AttentionTile* tiles, int n_tiles, const AttentionPartitions& partitions,
                                    float* workspace, float* out) {
                        args.out = out;
                        contiguous_attention(args, tiles, n_tiles, partitions, workspace, cudaStream_t{});
                    });
                const double error = relative_error(got, want);
                INFO("relative error " << error);
                CHECK(error < kFp32Tolerance);
                // The same kernel over the same values in the same order: the paged launch's very bits.
                CHECK(got == device_paged(batch, how));
            }
        }
    }
}

}  // namespace
}  // namespace kvx::cuda
