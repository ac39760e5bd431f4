// One forward pass's worth of work, in the form every backend consumes: a flat list of token rows, each
// belonging to a sequence and a position, plus, per layer group, the slots and block tables those rows use.
#pragma once

#include <cstdint>
#include <vector>

namespace kvx {

// What the layers of one group (engine/cache/kv_cache_groups.h) read and write: the group's own blocks, so its
// own slots and tables. A windowed group's tables hold -1 before the oldest row's window; its attention
// reads positions max(0, p - W + 1) .. p only, and so never a -1 entry.
struct GroupRows {
    int32_t window = 0;                 // 0: full attention; W: a row at p sees p - W + 1 .. p
    std::vector<int64_t> slots;         // [n_rows] cache slot for the row's K/V: block * block_size + offset
    std::vector<int32_t> block_tables;  // [n_seqs][table_stride] physical block ids of this group, row-major
    int32_t table_stride = 0;
};

struct ForwardBatch {
    std::vector<int32_t> tokens;     // [n_rows] token ids
    std::vector<int32_t> positions;  // [n_rows] absolute position of each token in its sequence
    std::vector<int32_t> row_seq;    // [n_rows] index of the row's block table in each group's block_tables
    std::vector<GroupRows> groups;   // [n_groups], in the engine's group order
    std::vector<int32_t> logit_rows; // ascending rows whose logits the caller wants

    int32_t n_rows() const { return static_cast<int32_t>(tokens.size()); }
};

}  // namespace kvx
