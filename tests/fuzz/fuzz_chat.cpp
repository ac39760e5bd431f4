// A chat session's decisions about user text (engine/generation/chat_session.cpp): any system message and
// messages, with GPT-2's tokenizer given ChatML's markers as special tokens, over a backend that computes
// nothing. A message must never be encoded with a marker it typed, and a turn kvx refuses leaves the
// conversation as it was.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "engine/generation/chat_session.h"
#include "engine/tokenizer/bpe_spec.h"
#include "engine/tokenizer/tokenizer_bpe.h"
#include "fuzz_support.h"

namespace {

using namespace kvx;

constexpr int32_t kImStart = 50257, kImEnd = 50258, kVocab = 50259;

const BpeTokenizer& chatml_gpt2() {
    static const BpeTokenizer tokenizer = [] {
        BpeTokenizerSpec spec = read_gpt2_tokenizer(KVX_TESTDATA_DIR "/models/gpt2-tokenizer/encoder.json",
                                                    KVX_TESTDATA_DIR "/models/gpt2-tokenizer/vocab.bpe");
        spec.added_tokens.push_back({kImStart, "<|im_start|>", true, false, false, false, false});
        spec.added_tokens.push_back({kImEnd, "<|im_end|>", true, false, false, false, false});
        return BpeTokenizer(spec);
    }();
    return tokenizer;
}

// Logits that always favour token 11 (","): an answer of a few tokens, no work.
class CommaBackend final : public Backend {
public:
    std::string name() const override { return "comma"; }
    void allocate_kv(const DecoderPlan&) override {}
    void copy_blocks(std::span<const std::vector<BlockCopy>>) override {}
    void forward(const ForwardBatch& batch, float* logits) override {
        std::fill(logits, logits + batch.logit_rows.size() * kVocab, 0.0f);
        for (size_t i = 0; i < batch.logit_rows.size(); ++i) logits[i * kVocab + 11] = 1.0f;
    }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    FuzzedDataProvider input(data, size);
    ModelConfig config;
    config.dim = config.hidden_dim = config.head_dim = 2;
    config.n_layers = config.n_heads = config.n_kv_heads = 1;
    config.vocab_size = kVocab;
    config.max_seq_len = 256;
    config.has_chat = true;
    config.chat.format = "chatml";
    EngineOptions options;
    options.block_size = 16;
    Engine engine(config, std::make_unique<CommaBackend>(), options);
    std::optional<std::string> system;
    if (input.ConsumeBool()) system = input.ConsumeRandomLengthString(256);
    const bool parse_special = input.ConsumeBool();
    ChatSession chat(engine, config, chatml_gpt2(), system, parse_special);
    Sampler sampler(SamplerOptions{.temperature = 0.0f});
    while (input.remaining_bytes() > 0) {
        const std::string message = input.ConsumeRandomLengthString(512);
        const int32_t before = chat.conversation_tokens();
        const int32_t turns = chat.turns();
        fuzz::accepted_or_refused([&] {
            if (!parse_special) {
                // Markers come from the template only: the user's two and the assistant header's, plus the
                // system message's two on the first turn, or the closing of the previous answer on a later one.
                const std::vector<int32_t> tokens = chat.turn_tokens(message);
                const auto markers = std::count(tokens.begin(), tokens.end(), kImStart) +
                                     std::count(tokens.begin(), tokens.end(), kImEnd);
                const long expected = chat.turns() == 0 ? (system && !system->empty() ? 5 : 3) : 4;
                if (markers != expected) std::abort();
            }
            GenerationOptions generation;
            generation.max_new_tokens = 3;
            chat.reply(message, sampler, generation, [](std::string_view) {});
        });
        // A refused turn changed nothing; an accepted one added its tokens.
        if (chat.turns() == turns && chat.conversation_tokens() != before) std::abort();
    }
    return 0;
}
