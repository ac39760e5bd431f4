// A chat session's decisions about user text (engine/generation/chat_session.cpp): any system message and
// messages, with GPT-2's tokenizer given ChatML's markers as special tokens, over a backend that computes
// nothing. A message must never be encoded with a marker it typed, and a turn kvx refuses leaves the
// conversation as it was.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "engine/generation/chat_session.h"
#include "fuzz_support.h"

using namespace kvx;
using fuzz::kImEnd;
using fuzz::kImStart;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    FuzzedDataProvider input(data, size);
    const ModelConfig config = fuzz::chatml_config();
    EngineOptions options;
    options.block_size = 16;
    Engine engine(config, std::make_unique<fuzz::CommaBackend>(), options);
    std::optional<std::string> system;
    if (input.ConsumeBool()) system = input.ConsumeRandomLengthString(256);
    const bool parse_special = input.ConsumeBool();
    ChatSession chat(engine, config, fuzz::chatml_gpt2(), system, parse_special);
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
