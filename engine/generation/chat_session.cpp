#include "engine/generation/chat_session.h"

#include "kernels/error.h"

namespace kvx {

ChatSession::ChatSession(Engine& engine, const ModelConfig& config, const Tokenizer& tokenizer,
                         std::optional<std::string> system, bool parse_special)
    : engine_(engine), tokenizer_(tokenizer), template_(config, tokenizer), parse_special_(parse_special) {
    system_ = system ? std::move(system) : template_.default_system();
    if (system_ && system_->empty()) system_.reset();
    seq_ = engine.new_sequence();
}

ChatSession::~ChatSession() { engine_.free_sequence(seq_); }

std::vector<ChatTemplate::Piece> ChatSession::turn_pieces(std::string_view user_message) const {
    std::vector<ChatTemplate::Piece> pieces;
    // Closes the previous answer, whose stop token was not appended.
    if (turns_ > 0) pieces.push_back({std::string(template_.format().turn_end) + "\n", false});
    template_.append_turn(pieces, "user", user_message, turns_ == 0 ? system_ : std::nullopt);
    template_.append_answer_header(pieces);
    return pieces;
}

std::string ChatSession::turn_text(std::string_view user_message) const {
    std::string text;
    for (const ChatTemplate::Piece& piece : turn_pieces(user_message)) text += piece.text;
    return text;
}

std::vector<int32_t> ChatSession::turn_tokens(std::string_view user_message) const {
    // BOS only where the template writes it (Gemma's): HF's apply_chat_template tokenizes the rendered text
    // without adding one.
    std::vector<int32_t> tokens;
    if (turns_ == 0 && template_.bos_token() >= 0) tokens.push_back(template_.bos_token());
    if (pending_token_ >= 0) tokens.push_back(pending_token_);
    const std::vector<int32_t> turn = template_.encode(turn_pieces(user_message), parse_special_);
    tokens.insert(tokens.end(), turn.begin(), turn.end());
    return tokens;
}

GenerationStats ChatSession::reply(std::string_view user_message, Sampler& sampler, GenerationOptions options,
                                   const std::function<void(std::string_view)>& emit) {
    const std::vector<int32_t> tokens = turn_tokens(user_message);
    options.stop_token_ids.push_back(template_.end_of_turn_token());
    GenerationStats stats = continue_sequence(engine_, seq_, tokenizer(), sampler, tokens, options, emit);
    pending_token_ = stats.unappended_token;
    ++turns_;
    return stats;
}

}  // namespace kvx
