// Host planning of an attention launch (cuda_kernels.h): how a batch is cut into tiles, how a tile's key range
// is cut into partitions, and the workspace the partitions need. Plain host code, apart from the kernels in
// cuda/kernels/paged_attention.cu so that it builds with the project's full warnings and changes for its own reasons
// (load balance), not the kernel's.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/kernels/cuda_kernels.h"
#include "kernels/error.h"

namespace kvx::cuda {

namespace {

// A partition shorter than this costs more in its block's fixed work (staging the queries, writing and
// merging a softmax state per query) than it gains in parallelism.
constexpr int kMinPartitionTokens = 256;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void require(bool ok, const std::string& message) {
    if (!ok) throw Error(message);
}

}  // namespace

std::vector<AttentionTile> plan_attention_tiles(std::span<const int32_t> row_seq, int group_size) {
    require(group_size >= 1, "plan_attention_tiles: group_size must be at least 1, got " + std::to_string(group_size));
    const int n_rows = static_cast<int>(row_seq.size());
    std::vector<AttentionTile> tiles;
    if (group_size > kTileQueries) {
        // A group too large for one tile: each row's heads in pieces of kTileQueries.
        for (int r = 0; r < n_rows; ++r)
            for (int h = 0; h < group_size; h += kTileQueries)
                tiles.push_back({r, 1, h, std::min(kTileQueries, group_size - h)});
        return tiles;
    }
    // Whole groups; consecutive rows of one sequence (a prefill chunk) share a tile, so that they read each
    // key once.
    const int rows_per_tile = kTileQueries / group_size;
    for (int run_begin = 0; run_begin < n_rows;) {
        int run_end = run_begin + 1;
        while (run_end < n_rows && row_seq[static_cast<size_t>(run_end)] == row_seq[static_cast<size_t>(run_begin)])
            ++run_end;
        for (int r = run_begin; r < run_end; r += rows_per_tile)
            tiles.push_back({r, std::min(rows_per_tile, run_end - r), 0, group_size});
        run_begin = run_end;
    }
    return tiles;
}

AttentionPartitions plan_attention_partitions(int n_tiles, int n_kv_heads, int max_span, int sm_count,
                                              int max_partitions) {
    require(n_tiles >= 0 && n_kv_heads >= 1 && max_span >= 0 && sm_count >= 1 && max_partitions >= 1,
            "plan_attention_partitions: needs n_tiles >= 0, n_kv_heads >= 1, max_span >= 0, sm_count >= 1 and "
            "max_partitions >= 1, got " + std::to_string(n_tiles) + ", " + std::to_string(n_kv_heads) + ", " +
                std::to_string(max_span) + ", " + std::to_string(sm_count) + ", " + std::to_string(max_partitions));
    const int64_t blocks = int64_t{n_tiles} * n_kv_heads;
    const int64_t to_fill_device = blocks == 0 ? 1 : ceil_div(2 * int64_t{sm_count}, blocks);
    const int64_t n = std::max<int64_t>(1, std::min({to_fill_device, ceil_div(max_span, kMinPartitionTokens),
                                                     ceil_div(max_span, kKeyChunk), int64_t{max_partitions}}));
    const int64_t tokens = std::max<int64_t>(kKeyChunk, ceil_div(ceil_div(max_span, n), kKeyChunk) * kKeyChunk);
    // Rounding the pieces up to whole chunks can leave the last ones empty: drop those.
    const int64_t needed = std::max<int64_t>(1, ceil_div(max_span, tokens));
    return {static_cast<int>(needed), static_cast<int>(tokens)};
}

size_t attention_workspace_floats(int n_rows, int n_heads, int head_dim, int n_partitions) {
    require(n_rows >= 0 && n_heads >= 0 && head_dim >= 0 && n_partitions >= 1,
            "attention_workspace_floats: needs sizes >= 0 and n_partitions >= 1, got n_partitions " +
                std::to_string(n_partitions));
    if (n_partitions == 1) return 0;
    // One softmax state per (row, head, partition): head_dim partial sums, then its max and sum
    // (layout in cuda/kernels/paged_attention.cu).
    return static_cast<size_t>(n_rows) * static_cast<size_t>(n_heads) * static_cast<size_t>(n_partitions) *
           (static_cast<size_t>(head_dim) + 2);
}

}  // namespace kvx::cuda
