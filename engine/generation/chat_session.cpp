#include "engine/generation/chat_session.h"

#include "kernels/error.h"

namespace kvx {
namespace {

std::string_view trimmed(std::string_view s) {
    constexpr std::string_view space = " \t\n\r\v\f";
    const size_t first = s.find_first_not_of(space);
    if (first == std::string_view::npos) return {};
    return s.substr(first, s.find_last_not_of(space) - first + 1);
}

}  // namespace

ChatSession::ChatSession(Engine& engine, const ModelConfig& config, const Tokenizer& tokenizer,
                         std::optional<std::string> system, bool parse_special)
    : engine_(engine), tokenizer_(tokenizer), parse_special_(parse_special) {
    if (!config.has_chat)
        throw Error("the model has no chat template (convert it with --chat-template FILE), so kvx cannot chat with it");
    if (config.chat.format.empty())
        throw Error("kvx cannot apply this model's chat template '" + config.chat.template_file +
                    "': " + (config.chat.unsupported_reason.empty() ? "unknown format" : config.chat.unsupported_reason));
    format_ = find_chat_format(config.chat.format);
    if (!format_)  // load_model_config refuses other names; a hand-made config may still hold one
        throw Error("kvx applies no chat format named '" + config.chat.format + "'");
    const std::vector<int32_t> end = tokenizer.encode(format_->turn_end, /*add_bos=*/false);
    if (end.size() != 1)
        throw Error("the chat template ends a turn with '" + std::string(format_->turn_end) +
                    "', but the tokenizer does not have it as one special token");
    end_of_turn_ = end[0];
    if (config.chat.add_bos) bos_ = config.bos_token_id;
    if (system)
        system_ = *system;
    else if (config.chat.has_default_system)
        system_ = config.chat.default_system;
    if (system_ && system_->empty()) system_.reset();
    seq_ = engine.new_sequence();
}

ChatSession::~ChatSession() { engine_.free_sequence(seq_); }

std::vector<ChatSession::Piece> ChatSession::turn_pieces(std::string_view user_message) const {
    const std::string start(format_->turn_start), end(format_->turn_end);
    if (format_->trim_messages) user_message = trimmed(user_message);
    std::vector<Piece> pieces;
    if (turns_ == 0) {
        if (system_ && format_->system_turn) pieces = {{start + "system\n", false}, {*system_, true}, {end + "\n", false}};
    } else {
        pieces.push_back({end + "\n", false});  // closes the previous answer, whose stop token was not appended
    }
    pieces.push_back({start + "user\n", false});
    if (turns_ == 0 && system_ && !format_->system_turn) {
        pieces.push_back({*system_, true});
        pieces.push_back({"\n\n", false});
    }
    pieces.push_back({std::string(user_message), true});
    pieces.push_back({end + "\n" + start + std::string(format_->assistant_role) + "\n", false});
    return pieces;
}

std::string ChatSession::turn_text(std::string_view user_message) const {
    std::string text;
    for (const Piece& piece : turn_pieces(user_message)) text += piece.text;
    return text;
}

std::vector<int32_t> ChatSession::turn_tokens(std::string_view user_message) const {
    // BOS only where the template writes it (Gemma's): HF's apply_chat_template tokenizes the rendered text
    // without adding one.
    std::vector<int32_t> tokens;
    if (turns_ == 0 && bos_ >= 0) tokens.push_back(bos_);
    if (pending_token_ >= 0) tokens.push_back(pending_token_);
    auto append = [&](const std::vector<int32_t>& more) { tokens.insert(tokens.end(), more.begin(), more.end()); };
    if (parse_special_) {
        append(tokenizer_.encode(turn_text(user_message), /*add_bos=*/false));
        return tokens;
    }
    // Cut where the user's text starts and ends: the byte-level pre-tokenizer cuts at the newline that ends
    // each header anyway, so for an ordinary message these are the tokens of the whole rendered text (the chat
    // CLI test holds them to HF's encoding of it).
    for (const Piece& piece : turn_pieces(user_message))
        append(piece.from_user ? tokenizer_.encode_text(piece.text) : tokenizer_.encode(piece.text, /*add_bos=*/false));
    return tokens;
}

GenerationStats ChatSession::reply(std::string_view user_message, Sampler& sampler, GenerationOptions options,
                                   const std::function<void(std::string_view)>& emit) {
    const std::vector<int32_t> tokens = turn_tokens(user_message);
    options.stop_token_ids.push_back(end_of_turn_);
    GenerationStats stats = continue_sequence(engine_, seq_, tokenizer_, sampler, tokens, options, emit);
    pending_token_ = stats.unappended_token;
    ++turns_;
    return stats;
}

}  // namespace kvx
