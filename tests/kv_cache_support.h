// Helpers for the cache manager's tests: appends that check the invariants afterwards, and token runs.
#pragma once

#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include "engine/cache/kv_cache_manager.h"

namespace kvx::test {

// n token ids first, first + 1, ...: distinct runs give distinct blocks.
inline std::vector<int32_t> token_run(int32_t n, int32_t first = 0) {
    std::vector<int32_t> tokens(static_cast<size_t>(n));
    std::iota(tokens.begin(), tokens.end(), first);
    return tokens;
}

// Appends tokens and returns their slots, checking the invariants afterwards.
inline std::vector<int64_t> append(KvCacheManager& m, SeqId seq, std::span<const int32_t> tokens,
                                   std::vector<BlockCopy>* copies = nullptr) {
    std::vector<int64_t> slots(tokens.size());
    std::vector<BlockCopy> local;
    m.append_slots(seq, tokens, slots.data(), copies ? *copies : local);
    m.check_invariants();
    return slots;
}

// Appends n tokens of a run.
inline std::vector<int64_t> append(KvCacheManager& m, SeqId seq, int32_t n, std::vector<BlockCopy>* copies = nullptr) {
    return append(m, seq, token_run(n, 1000 + m.length(seq)), copies);
}

// How many leading table entries the window has released.
inline int32_t released_blocks(const KvCacheManager& m, SeqId seq) {
    int32_t n = 0;
    for (int32_t block : m.block_table(seq)) {
        if (block >= 0) break;
        ++n;
    }
    return n;
}

}  // namespace kvx::test
