#include "engine/tokenizer/bpe_model.h"

#include <cstdio>
#include <queue>

#include "engine/tokenizer/byte_level.h"
#include "kernels/error.h"

namespace kvx {
namespace {

uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

}  // namespace

BpeModel::BpeModel(const BpeModelSpec& spec, const std::string& source)
    : fuse_unk_(spec.fuse_unk), ignore_merges_(spec.ignore_merges) {
    std::unordered_map<std::string_view, int32_t> ids;  // token text -> id
    ids.reserve(spec.vocab.size());
    for (const auto& [text, id] : spec.vocab) {
        ids[text] = id;
        if (spec.ignore_merges)
            if (auto bytes = byte_level::bytes_of_text(text)) raw_vocab_[*bytes] = id;
    }
    auto id_of = [&](const std::string& text, const char* what) {
        auto it = ids.find(text);
        if (it == ids.end()) throw Error(source + ": " + what + " '" + text + "' is not in the vocabulary");
        return it->second;
    };

    merges_.reserve(spec.merges.size());
    for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
        const auto& [left, right] = spec.merges[rank];
        const int32_t left_id = id_of(left, "merge part"), right_id = id_of(right, "merge part");
        // A pair listed twice keeps its later rank, as HF's merge map does.
        merges_[pair_key(left_id, right_id)] = {static_cast<uint32_t>(rank), id_of(left + right, "the result of merge")};
    }
    if (!spec.unk_token.empty()) unk_id_ = id_of(spec.unk_token, "unk_token");

    for (int b = 0; b < 256; ++b) {
        const std::string symbol = byte_level::text_of_bytes(std::string(1, static_cast<char>(b)));  // UTF-8
        Start& start = start_[static_cast<size_t>(b)];
        if (auto it = ids.find(symbol); it != ids.end()) {
            start.ids = {it->second};
        } else if (spec.byte_fallback) {
            // HF falls back on the UTF-8 bytes of the character it looked for (two for 'Ġ'), all or none.
            for (unsigned char u : symbol) {
                char piece[8];
                std::snprintf(piece, sizeof piece, "<0x%02X>", u);
                auto fallback = ids.find(piece);
                if (fallback == ids.end()) {
                    start.ids.clear();
                    break;
                }
                start.ids.push_back(fallback->second);
            }
        }
    }
}

const BpeModel::Merge* BpeModel::find_merge(int32_t left, int32_t right) const {
    auto it = merges_.find(pair_key(left, right));
    return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
    if (ignore_merges_)
        if (auto it = raw_vocab_.find(std::string(word)); it != raw_vocab_.end()) return out.push_back(it->second);
    const bool cacheable = word.size() <= kCacheMaxWord;
    if (cacheable) {
        std::lock_guard lock(cache_mutex_);
        if (auto it = cache_.find(word); it != cache_.end()) {
            out.insert(out.end(), it->second.begin(), it->second.end());
            return;
        }
    }

    std::vector<int32_t> symbols;  // [<= bytes of the word]
    symbols.reserve(word.size());
    bool unk_pending = false;  // an unknown byte (or, with fuse_unk, a run of them) not yet emitted
    for (char c : word) {
        const Start& start = start_[static_cast<unsigned char>(c)];
        if (!start.ids.empty()) {
            if (unk_pending) symbols.push_back(unk_id_), unk_pending = false;
            symbols.insert(symbols.end(), start.ids.begin(), start.ids.end());
        } else if (unk_id_ >= 0) {
            if (unk_pending && !fuse_unk_) symbols.push_back(unk_id_);
            unk_pending = true;
        }
    }
    if (unk_pending) symbols.push_back(unk_id_);
    merge(symbols);

    out.insert(out.end(), symbols.begin(), symbols.end());
    if (cacheable) {
        std::lock_guard lock(cache_mutex_);
        if (cache_.size() >= kCacheCapacity) cache_.clear();
        cache_.emplace(word, std::move(symbols));
    }
}

void BpeModel::merge(std::vector<int32_t>& symbols) const {
    if (symbols.size() < 2) return;
    const auto n = static_cast<int32_t>(symbols.size());
    // A doubly linked list over the symbols; a merge keeps the left symbol and unlinks the right one.
    std::vector<int32_t> prev(symbols.size()), next(symbols.size());  // [n], -1 / n at the ends
    for (int32_t i = 0; i < n; ++i) prev[static_cast<size_t>(i)] = i - 1, next[static_cast<size_t>(i)] = i + 1;

    struct Candidate {
        uint32_t rank;
        int32_t pos;  // the left symbol
        int32_t merged_id;
        // std::priority_queue pops the largest: "larger" means lower rank, then further left.
        bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Candidate> queue;
    auto push_pair = [&](int32_t left) {
        const int32_t right = next[static_cast<size_t>(left)];
        if (right >= n) return;
        if (const Merge* m = find_merge(symbols[static_cast<size_t>(left)], symbols[static_cast<size_t>(right)]))
            queue.push({m->rank, left, m->merged_id});
    };
    for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);

    constexpr int32_t removed = -1;
    while (!queue.empty()) {
        const Candidate c = queue.top();
        queue.pop();
        const auto left = static_cast<size_t>(c.pos);
        if (symbols[left] == removed) continue;
        const int32_t right = next[left];
        if (right >= n) continue;
        // Stale when either side changed since the entry was made: the pair no longer merges into merged_id.
        const Merge* m = find_merge(symbols[left], symbols[static_cast<size_t>(right)]);
        if (!m || m->merged_id != c.merged_id) continue;

        symbols[left] = c.merged_id;
        symbols[static_cast<size_t>(right)] = removed;
        const int32_t after = next[static_cast<size_t>(right)];
        next[left] = after;
        if (after < n) prev[static_cast<size_t>(after)] = c.pos;
        if (prev[left] >= 0) push_pair(prev[left]);
        push_pair(c.pos);
    }
    std::erase(symbols, removed);
}

}  // namespace kvx
