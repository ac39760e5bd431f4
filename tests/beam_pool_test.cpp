// The KV pool beam search asks for (beam_search_blocks_needed) is enough for every prompt length, token count,
// beam count and block size in small ranges, run through the real Engine and cache over a backend that
// computes nothing. `kvx generate -p hi -n 5 --beams 4` once failed with "KV cache pool exhausted": the
// engine's check before a pass counted a copy for every beam whose last block was shared, though the last of
// them writes in place.
#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/generation/beam_search.h"
#include "engine/runtime/engine.h"
#include "kernels/error.h"

namespace kvx {
namespace {

constexpr int32_t kVocab = 13;

// Logits from a hash of each row's token and position: beams tell candidates apart, and no work is done.
class HashedLogitsBackend final : public Backend {
public:
    std::string name() const override { return "hashed logits"; }
    void allocate_kv(const DecoderPlan&) override {}
    void copy_blocks(std::span<const std::vector<BlockCopy>>) override {}
    void forward(const ForwardBatch& batch, float* logits) override {
        for (size_t i = 0; i < batch.logit_rows.size(); ++i) {
            const size_t r = static_cast<size_t>(batch.logit_rows[i]);
            uint64_t h = uint64_t(batch.tokens[r]) * 0x9e3779b97f4a7c15ull + uint64_t(batch.positions[r]) * 0xbf58476d1ce4e5b9ull;
            for (int32_t v = 0; v < kVocab; ++v) {
                h ^= h >> 29;
                h *= 0x94d049bb133111ebull;
                logits[i * kVocab + static_cast<size_t>(v)] = static_cast<float>(h >> 40) / float(1 << 24) * 4.0f;
            }
        }
    }
};

ModelConfig tiny_config(int32_t max_seq_len) {
    ModelConfig c;
    c.dim = c.hidden_dim = c.head_dim = 2;
    c.n_layers = c.n_heads = c.n_kv_heads = 1;
    c.vocab_size = kVocab;
    c.max_seq_len = max_seq_len;
    return c;
}

TEST_CASE("forks of one parent append in one pass with one copy fewer than they are", "[engine][beam]") {
    EngineOptions o;
    o.block_size = 16;
    o.num_blocks = 4;
    Engine engine(tiny_config(64), std::make_unique<HashedLogitsBackend>(), o);
    const std::vector<int32_t> prompt = {1, 2, 3};  // one partly filled block
    const SeqId parent = engine.new_sequence();
    engine.forward({{parent, prompt, false}});
    std::vector<SeqId> seqs = {parent};
    for (int i = 0; i < 3; ++i) seqs.push_back(engine.fork_sequence(parent));
    const int32_t token = 4;
    std::vector<SequenceInput> inputs;
    for (SeqId s : seqs) inputs.push_back({s, {&token, 1}, false});
    // Three copies and the original, in a pool of four: exactly enough.
    REQUIRE_NOTHROW(engine.forward(inputs));
    CHECK(engine.cache().pool().num_available() == 0);
    CHECK(engine.last_copies()[0].size() == 3);
    engine.cache_groups().check_invariants();
}

TEST_CASE("beam search fits the pool it asks for, for every small prompt, length, beam count and block size",
          "[engine][beam]") {
    int runs = 0;
    for (int32_t block_size : {1, 2, 4, 16}) {
        for (int32_t prompt_len = 1; prompt_len <= 33; ++prompt_len) {
            for (int32_t n = 1; n <= 20; ++n) {
                for (int32_t beams = 1; beams <= 5; ++beams) {
                    BeamSearchOptions options;
                    options.num_beams = beams;
                    options.max_new_tokens = n;
                    const int64_t blocks = beam_search_blocks_needed(prompt_len, options, block_size);
                    EngineOptions o;
                    o.block_size = block_size;
                    o.num_blocks = static_cast<int32_t>(blocks);
                    o.context = prompt_len + n;
                    Engine engine(tiny_config(64), std::make_unique<HashedLogitsBackend>(), o);
                    std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
                    for (int32_t i = 0; i < prompt_len; ++i) prompt[static_cast<size_t>(i)] = (i * 7 + 1) % kVocab;
                    INFO("block size " << block_size << ", prompt " << prompt_len << ", n " << n << ", beams " << beams
                                       << ", pool " << blocks);
                    BeamSearchResult result;
                    REQUIRE_NOTHROW(result = beam_search(engine, prompt, options));
                    REQUIRE(result.stats.peak_blocks_in_use <= blocks);
                    REQUIRE(engine.cache().pool().num_used() == 0);  // every beam freed
                    ++runs;
                }
            }
        }
    }
    CHECK(runs == 4 * 33 * 20 * 5);
}

}  // namespace
}  // namespace kvx
