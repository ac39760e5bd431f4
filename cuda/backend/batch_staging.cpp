#include "cuda/backend/batch_staging.h"

#include <algorithm>
#include <cstring>

#include "kernels/error.h"

namespace kvx::cuda {
namespace {

constexpr size_t kAlign = 16;

size_t aligned(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Appends a segment of `bytes` to a layout being built, returning its offset.
size_t take(size_t& end, size_t bytes) {
    const size_t offset = end;
    end = aligned(end + bytes);
    return offset;
}

}  // namespace

BatchStaging::~BatchStaging() {
    if (pinned_) cudaFreeHost(pinned_);
}

void BatchStaging::reserve(size_t bytes) {
    if (bytes <= capacity_) return;
    const size_t capacity = std::max(bytes, 2 * capacity_);
    if (pinned_) cudaFreeHost(pinned_);
    pinned_ = nullptr;
    capacity_ = 0;
    void* p = nullptr;
    check(cudaMallocHost(&p, capacity), "cudaMallocHost (batch staging)");
    pinned_ = static_cast<std::byte*>(p);
    device_.resize(capacity);
    capacity_ = capacity;
    ++generation_;
}

StagedBatch BatchStaging::stage(const ForwardBatch& batch, std::span<const AttentionTile> tiles,
                                const StagingShape& shape, cudaStream_t stream) {
    const size_t n = static_cast<size_t>(shape.n_rows);
    if (batch.n_rows() != shape.n_rows || batch.logit_rows.size() != static_cast<size_t>(shape.n_logit_rows) ||
        tiles.size() != static_cast<size_t>(shape.n_tiles) || batch.groups.size() != shape.table_strides.size())
        throw Error("internal: a batch staged with a shape that is not its own");

    size_t end = 0;
    const size_t tokens_at = take(end, n * sizeof(int32_t));
    const size_t positions_at = take(end, n * sizeof(int32_t));
    const size_t row_seq_at = take(end, n * sizeof(int32_t));
    const size_t logit_rows_at = take(end, batch.logit_rows.size() * sizeof(int32_t));
    const size_t tiles_at = take(end, tiles.size_bytes());
    std::vector<size_t> slots_at, tables_at;
    for (size_t g = 0; g < batch.groups.size(); ++g) {
        slots_at.push_back(take(end, n * sizeof(int64_t)));
        tables_at.push_back(take(end, static_cast<size_t>(shape.n_seqs) * static_cast<size_t>(shape.table_strides[g]) *
                                          sizeof(int32_t)));
    }
    reserve(end);

    auto put = [&](size_t at, const void* data, size_t bytes) {
        if (bytes) std::memcpy(pinned_ + at, data, bytes);
    };
    put(tokens_at, batch.tokens.data(), n * sizeof(int32_t));
    put(positions_at, batch.positions.data(), n * sizeof(int32_t));
    put(row_seq_at, batch.row_seq.data(), n * sizeof(int32_t));
    put(logit_rows_at, batch.logit_rows.data(), batch.logit_rows.size() * sizeof(int32_t));
    put(tiles_at, tiles.data(), tiles.size_bytes());
    for (size_t g = 0; g < batch.groups.size(); ++g) {
        const GroupRows& rows = batch.groups[g];
        if (rows.slots.size() != n) throw Error("internal: a layer group's slots do not match the batch's rows");
        put(slots_at[g], rows.slots.data(), n * sizeof(int64_t));
        // Each sequence's table row, widened to the shape's stride with -1 (never read).
        const auto stride = static_cast<size_t>(shape.table_strides[g]);
        const auto given = static_cast<size_t>(rows.table_stride);
        if (given > stride || rows.block_tables.size() != static_cast<size_t>(shape.n_seqs) * given)
            throw Error("internal: a layer group's block tables do not match the staging shape");
        auto* table = reinterpret_cast<int32_t*>(pinned_ + tables_at[g]);
        for (size_t s = 0; s < static_cast<size_t>(shape.n_seqs); ++s) {
            std::copy_n(rows.block_tables.data() + s * given, given, table + s * stride);
            std::fill(table + s * stride + given, table + (s + 1) * stride, -1);
        }
    }
    check(cudaMemcpyAsync(device_.data(), pinned_, end, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync (batch)");

    const std::byte* d = device_.data();
    StagedBatch staged;
    staged.tokens = reinterpret_cast<const int32_t*>(d + tokens_at);
    staged.positions = reinterpret_cast<const int32_t*>(d + positions_at);
    staged.row_seq = reinterpret_cast<const int32_t*>(d + row_seq_at);
    staged.logit_rows = reinterpret_cast<const int32_t*>(d + logit_rows_at);
    staged.tiles = reinterpret_cast<const AttentionTile*>(d + tiles_at);
    for (size_t g = 0; g < batch.groups.size(); ++g) {
        staged.slots.push_back(reinterpret_cast<const int64_t*>(d + slots_at[g]));
        staged.block_tables.push_back(reinterpret_cast<const int32_t*>(d + tables_at[g]));
    }
    return staged;
}

}  // namespace kvx::cuda
