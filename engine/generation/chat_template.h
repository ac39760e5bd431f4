// A model's chat template as kvx applies it (engine/model/chat_format.h): the markers, the BOS the template
// writes, the default system message and the end-of-turn token, checked once, and the rendering of turns
// into text pieces and tokens. ChatSession renders one turn at a time over a live sequence; a server renders
// a whole conversation per request (conversation_tokens), and both give the tokens of the same text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/chat_format.h"
#include "engine/model/model_config.h"
#include "engine/tokenizer/tokenizer.h"

namespace kvx {

struct ChatMessage {
    std::string role;  // system (first message only), user, or assistant
    std::string content;
};

class ChatTemplate {
public:
    // A piece of a rendered conversation, with whether its text is a message (encoded as plain text, so
    // that markers typed by a user stay characters) or the template's own markup.
    struct Piece {
        std::string text;
        bool from_user;
    };

    // Throws kvx::Error when the model has no chat template, or one kvx cannot apply, or when the template's
    // end-of-turn marker is not a single token of the tokenizer.
    ChatTemplate(const ModelConfig& config, const Tokenizer& tokenizer);

    const ChatFormat& format() const { return *format_; }
    int32_t end_of_turn_token() const { return end_of_turn_; }
    int32_t bos_token() const { return bos_; }  // written before the first turn, or -1
    const std::optional<std::string>& default_system() const { return default_system_; }

    // Appends one turn of `role` (user or assistant). `system`, on a conversation's first user turn, is the
    // system message: a turn of its own before it, or the head of its message, as the format says.
    void append_turn(std::vector<Piece>& pieces, std::string_view role, std::string_view message,
                     const std::optional<std::string>& system) const;
    // The assistant's header that the model's answer follows.
    void append_answer_header(std::vector<Piece>& pieces) const;
    // The pieces' tokens (no BOS): markup encoded with special tokens, messages as plain text, or the whole
    // text with special tokens when parse_special.
    std::vector<int32_t> encode(const std::vector<Piece>& pieces, bool parse_special = false) const;

    // A whole conversation ending in the assistant's header, BOS first where the template writes one: the
    // prompt a server answers. A leading system message replaces the default one. Throws kvx::Error for a
    // system message elsewhere, or a role other than system, user and assistant.
    std::vector<int32_t> conversation_tokens(const std::vector<ChatMessage>& messages) const;

private:
    const Tokenizer& tokenizer_;
    const ChatFormat* format_ = nullptr;
    int32_t bos_ = -1;
    int32_t end_of_turn_ = -1;
    std::optional<std::string> default_system_;
};

}  // namespace kvx
