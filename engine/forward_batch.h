// One forward pass's worth of work, in the form every backend consumes: a flat list of token rows, each
// belonging to a sequence and a position, plus the block tables those sequences read.
#pragma once

#include <cstdint>
#include <vector>

namespace kvx {

// Sliding windows (not wired yet, docs/kv-cache.md): a windowed layer group will bring its own slots and
// block_tables, in which entries before a row's window are -1; its attention reads positions
// max(0, p - W + 1) .. p only, and so never a -1 entry.
struct ForwardBatch {
    std::vector<int32_t> tokens;        // [n_rows] token ids
    std::vector<int32_t> positions;     // [n_rows] absolute position of each token in its sequence
    std::vector<int32_t> row_seq;       // [n_rows] index of the row's block table in block_tables
    std::vector<int64_t> slots;         // [n_rows] cache slot for the row's K/V: block * block_size + offset
    std::vector<int32_t> block_tables;  // [n_seqs][table_stride] physical block ids, row-major
    int32_t table_stride = 0;
    std::vector<int32_t> logit_rows;    // ascending rows whose logits the caller wants

    int32_t n_rows() const { return static_cast<int32_t>(tokens.size()); }
};

}  // namespace kvx
