// The cache manager against a shadow model, over 114,000 random operations (the settings below): create,
// prefix reuse, fork, append (with copy-on-write and pool exhaustion), rewind (in range, out of range,
// refused by the window), decode bursts that slide windows, and free.
//
// The shadow keeps, per sequence, the plain list of its tokens. The test keeps its own "K/V" of every
// block, [num_blocks][block_size], written only through what the manager hands out (the slots of each
// append, the BlockCopy list before them) as a backend would. What it writes at position p is not the token
// but the prefix t[0..p] itself, interned in a trie: real K/V at p depend on every earlier token, so a
// block reused for a different prefix (a hash collision, a stale registration) shows up as a wrong id
// even where its own tokens match. After every operation: check_invariants(), every position a sequence
// still holds reads its own prefix, every position its next query needs is held, and the window bounds
// memory. A refused operation must leave everything as it was.
#include <catch2/catch.hpp>
#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "engine/cache/kv_cache_manager.h"
#include "kernels/error.h"

using namespace kvx;

namespace {

uint64_t colliding_hash(uint64_t, std::span<const int32_t> tokens) { return tokens.empty() ? 0 : uint64_t(tokens[0] & 1); }

// Prefix -> id: node of (parent prefix, next token). Id 0 is the empty prefix.
class PrefixTrie {
public:
    int64_t child(int64_t parent, int32_t token) {
        auto [it, fresh] = nodes_.try_emplace({parent, token}, static_cast<int64_t>(nodes_.size()) + 1);
        return it->second;
    }

private:
    std::map<std::pair<int64_t, int32_t>, int64_t> nodes_;
};

struct ShadowSequence {
    std::vector<int32_t> tokens;  // [length]
    std::vector<int64_t> prefix;  // [length] trie id of tokens[0..p]
};

// Everything a refused operation must leave as it was.
struct Snapshot {
    std::map<SeqId, std::pair<int32_t, std::vector<int32_t>>> tables;  // id -> (length, table)
    std::vector<int32_t> lru;
    std::vector<int32_t> free_ids;
    size_t registered = 0;
    bool operator==(const Snapshot&) const = default;
};

struct Config {
    int32_t num_blocks, block_size, window;
    BlockHashFn hash;
    int ops;
};

struct Counts {
    int appended = 0, exhausted = 0, copies = 0, rewound = 0, rewind_refused = 0, window_refused = 0;
    int forks = 0, frees = 0, hits = 0, hit_blocks = 0, whole_hits = 0, evictions = 0;
};

class RandomRun {
public:
    explicit RandomRun(const Config& c)
        : c_(c),
          m_(KvCacheConfig{c.num_blocks, c.block_size, c.window, c.hash}),
          kv_(static_cast<size_t>(c.num_blocks) * static_cast<size_t>(c.block_size), -1),
          rng_(static_cast<unsigned>(c.num_blocks * 131 + c.block_size * 17 + c.window + (c.hash == colliding_hash ? 7 : 0))) {
        // Stems: prompts that start alike, so that prefix reuse happens often.
        for (int i = 0; i < 4; ++i) {
            std::vector<int32_t> stem;
            for (int32_t j = 0; j < 6 * c.block_size; ++j) stem.push_back(token());
            stems_.push_back(stem);
        }
    }

    Counts run() {
        for (int op = 0; op < c_.ops; ++op) {
            step();
            m_.check_invariants();
            check_against_shadow();
        }
        for (auto& [id, s] : shadow_) m_.free_sequence(id);
        shadow_.clear();
        m_.check_invariants();
        CHECK(m_.pool().num_used() == 0);  // nothing leaked: every block free or cached
        CHECK(m_.pool().num_available() == c_.num_blocks);
        CHECK(m_.prefix_index().num_registered() >= static_cast<size_t>(m_.pool().num_cached()));
        return n_;
    }

private:
    int32_t token() { return static_cast<int32_t>(rng_() % 3); }  // a tiny vocabulary: equal blocks are common
    uint32_t pick(uint32_t n) { return static_cast<uint32_t>(rng_() % n); }
    SeqId any_sequence() {
        auto it = shadow_.begin();
        std::advance(it, pick(static_cast<uint32_t>(shadow_.size())));
        return it->first;
    }

    Snapshot snapshot() const {
        Snapshot s;
        for (const auto& [id, shadow] : shadow_) s.tables[id] = {m_.length(id), m_.block_table(id)};
        s.lru = m_.pool().lru_order();
        s.free_ids = m_.pool().free_ids();
        s.registered = m_.prefix_index().num_registered();
        return s;
    }

    void step() {
        const uint32_t kind = pick(100);
        if (shadow_.empty() || (kind < 12 && shadow_.size() < 10)) return create_plain_or_prefixed();
        const SeqId s = any_sequence();
        if (kind < 22 && shadow_.size() < 10) return fork(s);
        if (kind < 55) return append(s, random_tokens(pick(static_cast<uint32_t>(3 * c_.block_size + 1))));
        if (kind < 70) return rewind(s);
        if (kind < 80) {
            for (int i = 0; i < 2 * c_.block_size; ++i) append(s, random_tokens(1));  // a decode burst
            return;
        }
        if (kind < 90 || shadow_.size() >= 10) return free(s);
        create_plain_or_prefixed();
    }

    std::vector<int32_t> random_tokens(uint32_t n) {
        std::vector<int32_t> t(n);
        for (auto& x : t) x = token();
        return t;
    }

    void create_plain_or_prefixed() {
        if (pick(4) == 0) {
            shadow_[m_.create_sequence()] = {};
            return;
        }
        const std::vector<int32_t>& stem = stems_[pick(static_cast<uint32_t>(stems_.size()))];
        std::vector<int32_t> prompt(stem.begin(), stem.begin() + pick(static_cast<uint32_t>(stem.size())) + 1);
        // Some prompts are a stem's whole blocks, nothing more: cached whole, they start one token short.
        if (pick(4) == 0 && prompt.size() >= static_cast<size_t>(c_.block_size))
            prompt.resize(prompt.size() / static_cast<size_t>(c_.block_size) * static_cast<size_t>(c_.block_size));
        else
            for (int32_t t : random_tokens(pick(static_cast<uint32_t>(c_.block_size)) + 1)) prompt.push_back(t);

        const int32_t k = m_.cached_prefix_blocks(prompt);
        // Reuse must happen where it can: a live sequence that holds all of its first j full blocks, with the
        // prompt's tokens, guarantees j (the blocks are registered while held).
        int32_t must = 0;
        for (const auto& [id, sh] : shadow_) {
            size_t common = 0;
            while (common < sh.tokens.size() && common < prompt.size() && sh.tokens[common] == prompt[common]) ++common;
            int32_t j = static_cast<int32_t>(common / static_cast<size_t>(c_.block_size));
            const auto& table = m_.block_table(id);
            for (int32_t b = 0; b < j; ++b)
                if (table[static_cast<size_t>(b)] < 0) j = b;
            must = std::max(must, j);
        }
        must = std::min(must, static_cast<int32_t>(prompt.size() / static_cast<size_t>(c_.block_size)));
        CHECK(k >= must);
        CHECK(int64_t{k} * c_.block_size <= static_cast<int64_t>(prompt.size()));

        const SeqId s = m_.create_sequence(prompt, k);
        ShadowSequence& sh = shadow_[s];
        // A prompt cached whole leaves its last token to compute.
        const size_t cached = std::min(static_cast<size_t>(k) * static_cast<size_t>(c_.block_size), prompt.size() - 1);
        int64_t node = 0;
        for (size_t p = 0; p < cached; ++p) {
            node = trie_.child(node, prompt[p]);
            sh.tokens.push_back(prompt[p]);
            sh.prefix.push_back(node);
        }
        if (k > 0) {
            ++n_.hits;
            n_.hit_blocks += k;
            n_.whole_hits += static_cast<size_t>(k) * static_cast<size_t>(c_.block_size) == prompt.size() ? 1 : 0;
        }
        check_against_shadow();  // the reused blocks hold this prompt's prefix, exactly
        append(s, std::vector<int32_t>(prompt.begin() + static_cast<std::ptrdiff_t>(cached), prompt.end()));
    }

    void fork(SeqId s) {
        const SeqId child = m_.fork(s);
        shadow_[child] = shadow_.at(s);
        ++n_.forks;
    }

    void free(SeqId s) {
        m_.free_sequence(s);
        shadow_.erase(s);
        ++n_.frees;
    }

    void append(SeqId s, const std::vector<int32_t>& tokens) {
        ShadowSequence& sh = shadow_.at(s);
        if (sh.tokens.size() + tokens.size() > 256) return rewind_to(s, 0);  // keep the shadow checks cheap
        const Snapshot before = snapshot();
        const int32_t needed = m_.blocks_needed(s, static_cast<int32_t>(tokens.size()));
        const int32_t cached_before = m_.pool().num_cached(), free_before = m_.pool().num_free();
        std::vector<int64_t> slots(tokens.size());
        std::vector<BlockCopy> copies;
        try {
            m_.append_slots(s, tokens, slots.data(), copies);
        } catch (const Error&) {
            CHECK(needed > m_.pool().num_available());
            CHECK(snapshot() == before);
            CHECK(copies.empty());
            ++n_.exhausted;
            return;
        }
        CHECK(needed <= cached_before + free_before);
        if (needed > free_before) ++n_.evictions;
        // Perform the copies, then the writes, as the backend does.
        const size_t bs = static_cast<size_t>(c_.block_size);
        for (const BlockCopy& copy : copies) {
            CHECK(m_.pool().ref_count(copy.dst) == 1);
            std::copy_n(kv_.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(copy.src) * bs), bs,
                        kv_.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(copy.dst) * bs));
        }
        n_.copies += static_cast<int>(copies.size());
        int64_t node = sh.prefix.empty() ? 0 : sh.prefix.back();
        for (size_t i = 0; i < tokens.size(); ++i) {
            const size_t pos = sh.tokens.size();
            const int64_t slot = slots[i];
            CHECK(slot == int64_t{m_.block_table(s)[pos / bs]} * c_.block_size + static_cast<int64_t>(pos % bs));
            CHECK(m_.pool().ref_count(static_cast<int32_t>(slot / c_.block_size)) == 1);  // never a shared block
            node = trie_.child(node, tokens[i]);
            kv_[static_cast<size_t>(slot)] = node;
            sh.tokens.push_back(tokens[i]);
            sh.prefix.push_back(node);
        }
        ++n_.appended;
    }

    void rewind(SeqId s) {
        const int32_t len = static_cast<int32_t>(shadow_.at(s).tokens.size());
        rewind_to(s, static_cast<int32_t>(pick(static_cast<uint32_t>(len + 3))) - 1);  // -1 .. len + 1
    }

    void rewind_to(SeqId s, int32_t n) {
        ShadowSequence& sh = shadow_.at(s);
        const int32_t len = static_cast<int32_t>(sh.tokens.size());
        // The query at n needs keys max(0, n - W + 1) .. n - 1, and position n the block it goes into when
        // that block already exists: refused if any of them is no longer held.
        bool needs_released = false;
        if (n > 0 && n <= len) {
            for (int32_t key = c_.window > 0 ? std::max(0, n - c_.window + 1) : 0; key < n; ++key)
                needs_released |= m_.block_table(s)[static_cast<size_t>(key / c_.block_size)] < 0;
            if (n % c_.block_size != 0) needs_released |= m_.block_table(s)[static_cast<size_t>(n / c_.block_size)] < 0;
        }
        const Snapshot before = snapshot();
        try {
            m_.rewind_to(s, n);
        } catch (const Error&) {
            CHECK((n < 0 || n > len || needs_released));
            CHECK(snapshot() == before);
            ++(n < 0 || n > len ? n_.rewind_refused : n_.window_refused);
            return;
        }
        CHECK((n >= 0 && n <= len && !needs_released));
        sh.tokens.resize(static_cast<size_t>(n));
        sh.prefix.resize(static_cast<size_t>(n));
        ++n_.rewound;
    }

    void check_against_shadow() {
        const size_t bs = static_cast<size_t>(c_.block_size);
        REQUIRE(m_.num_sequences() == shadow_.size());
        for (const auto& [id, sh] : shadow_) {
            const int32_t len = static_cast<int32_t>(sh.tokens.size());
            REQUIRE(m_.length(id) == len);
            const auto& table = m_.block_table(id);
            REQUIRE(table.size() == (sh.tokens.size() + bs - 1) / bs);
            const int32_t first_key = c_.window > 0 ? std::max(0, len - c_.window + 1) : 0;
            int32_t held = 0;
            for (size_t b = 0; b < table.size(); ++b) held += table[b] >= 0;
            for (int32_t p = 0; p < len; ++p) {
                const int32_t block = table[static_cast<size_t>(p) / bs];
                if (block < 0) {
                    REQUIRE(p < first_key);  // the next query needs every key from first_key on
                    continue;
                }
                const int64_t got = kv_[static_cast<size_t>(block) * bs + static_cast<size_t>(p) % bs];
                if (got != sh.prefix[static_cast<size_t>(p)]) {
                    INFO("sequence " << id << " position " << p << " of " << len << ", block " << block);
                    REQUIRE(got == sh.prefix[static_cast<size_t>(p)]);
                }
            }
            // A window bounds what a sequence holds: one chunk's first query's keys, plus the chunk.
            if (c_.window > 0) {
                const int32_t max_chunk = 7 * c_.block_size;  // a prompt's uncached rest, at most a stem and a suffix
                CHECK(held <= (c_.window - 1 + max_chunk + c_.block_size - 1) / c_.block_size + 1);
            }
        }
    }

    Config c_;
    KvCacheManager m_;
    std::vector<int64_t> kv_;  // [num_blocks][block_size] trie id of the prefix whose K/V each slot holds
    std::mt19937 rng_;
    PrefixTrie trie_;
    std::vector<std::vector<int32_t>> stems_;
    std::map<SeqId, ShadowSequence> shadow_;
    Counts n_;
};

}  // namespace

TEST_CASE("random operations agree with a shadow model, keep the invariants and leak nothing", "[cache][random]") {
    const std::vector<Config> configs = {
        // blocks, block size, window, hash, operations
        {48, 4, 0, hash_block_tokens, 15000},
        {48, 4, 0, colliding_hash, 15000},
        {40, 1, 0, hash_block_tokens, 12000},
        {24, 16, 0, colliding_hash, 10000},
        // Windows bound what each sequence holds: smaller pools, so that they still run dry.
        {16, 4, 8, hash_block_tokens, 15000},  // the window's edge falls on block boundaries
        {14, 4, 6, colliding_hash, 15000},
        {20, 2, 3, hash_block_tokens, 12000},
        {16, 16, 20, hash_block_tokens, 10000},
        {14, 8, 1, colliding_hash, 10000},
    };
    int total = 0;
    for (const Config& c : configs) {
        INFO("blocks " << c.num_blocks << ", block size " << c.block_size << ", window " << c.window << ", "
                       << (c.hash == colliding_hash ? "colliding" : "real") << " hash");
        const Counts n = RandomRun(c).run();
        total += c.ops;
        // Every kind of event happened, so the run proved something about each.
        CHECK(n.appended > c.ops / 10);
        CHECK(n.exhausted > 0);
        if (c.block_size > 1) CHECK(n.copies > 0);  // one-token blocks are never partly filled
        CHECK(n.rewound > 0);
        CHECK(n.rewind_refused > 0);
        CHECK(n.forks > 0);
        CHECK(n.frees > 0);
        CHECK(n.hits > 0);
        CHECK(n.whole_hits > 0);
        CHECK(n.evictions > 0);
        if (c.window > 0 && c.window < 3 * c.block_size) CHECK(n.window_refused > 0);
        UNSCOPED_INFO("appends " << n.appended << ", exhausted " << n.exhausted << ", copies " << n.copies
                                 << ", rewinds " << n.rewound << ", window refusals " << n.window_refused
                                 << ", prefix hits " << n.hits << " (" << n.hit_blocks << " blocks, " << n.whole_hits
                                 << " whole prompts), evicting appends "
                                 << n.evictions);
    }
    CHECK(total >= 100000);
}
