// ChatSession over a scripted backend: what each turn appends to the conversation's cache, that nothing is
// recomputed between turns, and every refusal. No model and no kernels: the backend's logits make the
// "assistant" answer with the token ids given by a script, so the test knows each answer in advance.
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "engine/generation/chat_session.h"
#include "kernels/error.h"

using namespace kvx;

namespace {

// Character tokenizer: ids 0..255 are bytes; 256 and 257 are the format's turn markers (ChatML's unless
// told), split out as one token each wherever they occur in the text (as a tokenizer's special tokens are).
class CharTokenizer final : public Tokenizer {
public:
    static constexpr int32_t kStart = 256, kEnd = 257, kVocab = 258;
    std::string start = "<|im_start|>", end = "<|im_end|>";
    std::vector<int32_t> encode(std::string_view text, bool add_bos) const override {
        std::vector<int32_t> ids;
        if (add_bos) ids.push_back('^');
        for (size_t i = 0; i < text.size();) {
            if (text.substr(i).starts_with(start)) {
                ids.push_back(kStart);
                i += start.size();
            } else if (text.substr(i).starts_with(end)) {
                ids.push_back(kEnd);
                i += end.size();
            } else {
                ids.push_back(static_cast<unsigned char>(text[i++]));
            }
        }
        return ids;
    }
    std::string decode(int32_t, int32_t token) const override {
        if (token == kStart) return start;
        if (token == kEnd) return end;
        return std::string(1, static_cast<char>(token));
    }
};

// Logits whose argmax is the next token of the current answer script: after the conversation's last
// prompt token the backend "answers" script[turn] and then <|im_end|>. It records every token it is fed.
class ScriptedBackend final : public Backend {
public:
    std::vector<std::string> script;  // answers, one per turn
    std::vector<int32_t> fed;         // every token appended to the cache, in order
    size_t turn = 0, produced = 0;

    std::string name() const override { return "scripted"; }
    void allocate_kv(const DecoderPlan&) override {}
    void copy_blocks(std::span<const std::vector<BlockCopy>>) override {}
    void forward(const ForwardBatch& batch, float* logits) override {
        fed.insert(fed.end(), batch.tokens.begin(), batch.tokens.end());
        // A prompt (more than one row, or a marker) starts a new answer.
        if (batch.n_rows() > 1 || batch.tokens[0] >= CharTokenizer::kStart) produced = 0;
        std::fill(logits, logits + CharTokenizer::kVocab, 0.0f);
        const std::string& answer = script[std::min(turn, script.size() - 1)];
        const int32_t next = produced < answer.size() ? static_cast<unsigned char>(answer[produced]) : CharTokenizer::kEnd;
        if (next == CharTokenizer::kEnd) ++turn;
        ++produced;
        logits[next] = 1.0f;
    }
};

ModelConfig chat_config(int context = 512) {
    ModelConfig c;
    c.vocab_size = CharTokenizer::kVocab;
    c.max_seq_len = context;
    c.has_chat = true;
    c.chat.template_file = "chat_template.jinja";
    c.chat.format = "chatml";
    c.chat.has_default_system = true;
    c.chat.default_system = "Be brief.";
    return c;
}

struct Fixture {
    ModelConfig config;
    ScriptedBackend* backend;
    std::unique_ptr<Engine> engine;
    CharTokenizer tokenizer;
    Sampler sampler{SamplerOptions{0.0f, 0, 1.0f, 0}};

    explicit Fixture(std::vector<std::string> script, ModelConfig c = chat_config()) : config(c) {
        auto b = std::make_unique<ScriptedBackend>();
        b->script = std::move(script);
        backend = b.get();
        EngineOptions o;
        o.block_size = 4;
        engine = std::make_unique<Engine>(config, std::move(b), o);
    }
    std::string text_of(const std::vector<int32_t>& ids) const {
        std::string s;
        for (int32_t t : ids) s += tokenizer.decode(-1, t);
        return s;
    }
};

std::string reply(ChatSession& chat, Fixture& f, const std::string& message, int32_t max_new = -1) {
    std::string out;
    GenerationOptions o;
    o.max_new_tokens = max_new;
    chat.reply(message, f.sampler, o, [&](std::string_view t) { out += t; });
    return out;
}

}  // namespace

TEST_CASE("each chat turn appends only its new tokens and the cache holds the ChatML conversation", "[chat]") {
    Fixture f({"Four.", "Six."});
    ChatSession chat(*f.engine, f.config, f.tokenizer, std::nullopt);
    CHECK(reply(chat, f, "2+2?") == "Four.");
    const size_t fed_after_first = f.backend->fed.size();
    CHECK(reply(chat, f, "3+3?") == "Six.");

    // Everything fed, in order, is the conversation as the template renders it up to the last answer (its
    // stop token is sampled, not fed): the first turn's prompt and answer were never fed again.
    const std::string conversation =
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\nFour."
        "<|im_end|>\n<|im_start|>user\n3+3?<|im_end|>\n<|im_start|>assistant\nSix.";
    CHECK(f.text_of(f.backend->fed) == conversation);
    CHECK(f.text_of({f.backend->fed.begin() + static_cast<long>(fed_after_first), f.backend->fed.end()}) ==
          "<|im_end|>\n<|im_start|>user\n3+3?<|im_end|>\n<|im_start|>assistant\nSix.");
    CHECK(chat.turns() == 2);
    CHECK(chat.conversation_tokens() == static_cast<int32_t>(f.backend->fed.size()));
}

TEST_CASE("Gemma's turns: BOS first, the system message inside the first user turn, messages trimmed", "[chat]") {
    ModelConfig c = chat_config();
    c.chat.format = "gemma";
    c.chat.add_bos = true;
    c.bos_token_id = '^';
    c.chat.has_default_system = false;
    Fixture f({"Four.", "Six."}, c);
    f.tokenizer.start = "<start_of_turn>";
    f.tokenizer.end = "<end_of_turn>";
    ChatSession chat(*f.engine, f.config, f.tokenizer, std::string("Be brief."));
    CHECK(chat.end_of_turn_token() == CharTokenizer::kEnd);
    CHECK(chat.turn_text("  2+2?\n") ==
          "<start_of_turn>user\nBe brief.\n\n2+2?<end_of_turn>\n<start_of_turn>model\n");
    CHECK(reply(chat, f, "  2+2?\n") == "Four.");
    CHECK(reply(chat, f, "3+3?") == "Six.");
    CHECK(f.text_of(f.backend->fed) ==
          "^<start_of_turn>user\nBe brief.\n\n2+2?<end_of_turn>\n<start_of_turn>model\nFour.<end_of_turn>\n"
          "<start_of_turn>user\n3+3?<end_of_turn>\n<start_of_turn>model\nSix.");
}

TEST_CASE("a system message replaces the template's default, an empty one removes it", "[chat]") {
    Fixture f({"ok"});
    ChatSession custom(*f.engine, f.config, f.tokenizer, std::string("Talk like a pirate."));
    CHECK(custom.turn_text("hi") == "<|im_start|>system\nTalk like a pirate.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
                                    "<|im_start|>assistant\n");
    ChatSession none(*f.engine, f.config, f.tokenizer, std::string());
    CHECK(none.turn_text("hi") == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

TEST_CASE("an answer cut by -n leads the next turn with its unappended last token", "[chat]") {
    Fixture f({"abcdef", "x"});
    ChatSession chat(*f.engine, f.config, f.tokenizer, std::string());
    CHECK(reply(chat, f, "q1", 3) == "abc");
    const int32_t length_after_cut = chat.conversation_tokens();
    const std::vector<int32_t> next = chat.turn_tokens("q2");
    REQUIRE(!next.empty());
    CHECK(next[0] == 'c');  // sampled and shown, but its forward pass was not needed until now
    reply(chat, f, "q2");
    CHECK(f.text_of(f.backend->fed).find("abc<|im_end|>\n<|im_start|>user\nq2") != std::string::npos);
    CHECK(chat.conversation_tokens() > length_after_cut);
}

TEST_CASE("a turn that does not fit the context is refused and leaves the conversation as it was", "[chat]") {
    Fixture f({"hello"}, chat_config(64));
    ChatSession chat(*f.engine, f.config, f.tokenizer, std::string());
    reply(chat, f, "hi");
    const int32_t before = chat.conversation_tokens();
    const size_t fed_before = f.backend->fed.size();
    CHECK_THROWS_WITH(reply(chat, f, std::string(80, 'x')), Catch::Contains("exceed the context of 64"));
    CHECK(chat.conversation_tokens() == before);
    CHECK(f.backend->fed.size() == fed_before);
    CHECK(chat.turns() == 1);
}

TEST_CASE("chat refuses models without a template it can apply", "[chat]") {
    Fixture f({"x"});
    ModelConfig no_template = chat_config();
    no_template.has_chat = false;
    CHECK_THROWS_WITH(ChatSession(*f.engine, no_template, f.tokenizer, std::nullopt),
                      Catch::Contains("has no chat template"));

    ModelConfig unknown = chat_config();
    unknown.chat.format.clear();
    unknown.chat.unsupported_reason = "its rendering of a 1-message conversation is not ChatML";
    CHECK_THROWS_WITH(ChatSession(*f.engine, unknown, f.tokenizer, std::nullopt),
                      Catch::Contains("cannot apply this model's chat template") && Catch::Contains("not ChatML"));
}

TEST_CASE("chat refuses a tokenizer without the end-of-turn token", "[chat]") {
    class NoSpecials final : public Tokenizer {
    public:
        std::vector<int32_t> encode(std::string_view text, bool) const override {
            return std::vector<int32_t>(text.begin(), text.end());
        }
        std::string decode(int32_t, int32_t t) const override { return std::string(1, static_cast<char>(t)); }
    } bytes_only;
    Fixture f({"x"});
    CHECK_THROWS_WITH(ChatSession(*f.engine, f.config, bytes_only, std::nullopt),
                      Catch::Contains("'<|im_end|>'") && Catch::Contains("one special token"));
}
