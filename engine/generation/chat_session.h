// A conversation with an instruct model over one live sequence: each turn appends only its own new tokens
// (the closing of the previous answer, the user's message, the assistant header) to the KV cache that
// already holds the conversation, so nothing is recomputed between turns.
//
// The conversation format is the model's (engine/model/chat_format.h). ChatML, the one SmolLM2, Qwen and
// others use, renders a conversation as
//   <|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{message}<|im_end|>\n<|im_start|>assistant\n
// and the model ends its answer with <|im_end|>. That stop token is sampled but not appended, so the next
// turn's text starts by closing the answer: "<|im_end|>\n<|im_start|>user\n...". Gemma's is the same with
// other markers, its system message inside the first user turn, and a BOS first. An answer cut short (-n,
// Ctrl-C) is closed the same way, so the cache always holds exactly what the template renders; when the
// token limit ended the answer, its last token (sampled but never run) leads the next turn's tokens.
//
// The markers come from the template and the messages from the user: a message is encoded as plain text
// (Tokenizer::encode_text), so a user who types "<|im_end|>\n<|im_start|>system\n..." gets those characters,
// not a forged turn boundary. parse_special restores encoding the rendered turn as one text, markers typed
// by the user included.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/generation/chat_template.h"
#include "engine/generation/generator.h"
#include "engine/model/chat_format.h"
#include "engine/model/model_config.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/sampler.h"
#include "engine/tokenizer/tokenizer.h"

namespace kvx {

class ChatSession {
public:
    // Throws kvx::Error when the model has no chat template, or one kvx cannot apply, or when the template's
    // end-of-turn marker is not a single token of the tokenizer. `system` replaces the template's default
    // system message (an empty string means none).
    ChatSession(Engine& engine, const ModelConfig& config, const Tokenizer& tokenizer,
                std::optional<std::string> system, bool parse_special = false);
    ~ChatSession();
    ChatSession(const ChatSession&) = delete;
    ChatSession& operator=(const ChatSession&) = delete;

    // The text this turn appends to the conversation, and its tokens.
    std::string turn_text(std::string_view user_message) const;
    std::vector<int32_t> turn_tokens(std::string_view user_message) const;

    // Appends the user's turn and streams the assistant's answer through `emit`. options.stop_token_ids
    // gains the end-of-turn token. Throws kvx::Error, with the conversation unchanged, when the turn does
    // not fit the context or its text cannot be encoded (not valid UTF-8).
    GenerationStats reply(std::string_view user_message, Sampler& sampler, GenerationOptions options,
                          const std::function<void(std::string_view)>& emit);

    int32_t turns() const { return turns_; }
    int32_t conversation_tokens() const { return engine_.length(seq_); }
    int32_t end_of_turn_token() const { return template_.end_of_turn_token(); }

private:
    // The turn's text in pieces, each with whether the user wrote it.
    std::vector<ChatTemplate::Piece> turn_pieces(std::string_view user_message) const;
    const Tokenizer& tokenizer() const { return tokenizer_; }

    Engine& engine_;
    const Tokenizer& tokenizer_;
    ChatTemplate template_;
    std::optional<std::string> system_;  // the system message of the first turn, if any
    bool parse_special_ = false;
    int32_t pending_token_ = -1;  // the previous answer's last token, not yet in the cache, or -1
    SeqId seq_;
    int32_t turns_ = 0;
};

}  // namespace kvx
