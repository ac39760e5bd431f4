#include "engine/generation/chat_template.h"

#include "engine/model/chat_format.h"
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

ChatTemplate::ChatTemplate(const ModelConfig& config, const Tokenizer& tokenizer) : tokenizer_(tokenizer) {
    if (!config.has_chat)
        throw Error("the model has no chat template, so kvx cannot chat with it: give one with --chat-template (a format, " +
                    std::string(chat_format_names()) + ", or a Jinja file)");
    if (config.chat.format.empty())
        throw Error("kvx cannot apply this model's chat template '" + config.chat.template_file + "': " +
                    (config.chat.unsupported_reason.empty() ? "unknown format" : config.chat.unsupported_reason) +
                    "; name its format with --chat-template (" + std::string(chat_format_names()) + ")");
    format_ = find_chat_format(config.chat.format);
    if (!format_)  // load_model_config refuses other names; a hand-made config may still hold one
        throw Error("kvx applies no chat format named '" + config.chat.format + "'");
    const std::vector<int32_t> end = tokenizer.encode(format_->turn_end, /*add_bos=*/false);
    if (end.size() != 1)
        throw Error("the chat template ends a turn with '" + std::string(format_->turn_end) +
                    "', but the tokenizer does not have it as one special token");
    end_of_turn_ = end[0];
    if (config.chat.add_bos) bos_ = config.bos_token_id;
    if (config.chat.has_default_system && !config.chat.default_system.empty())
        default_system_ = config.chat.default_system;
}

void ChatTemplate::append_turn(std::vector<Piece>& pieces, std::string_view role, std::string_view message,
                               const std::optional<std::string>& system) const {
    const std::string start(format_->turn_start), end(format_->turn_end);
    if (format_->trim_messages) message = trimmed(message);
    const bool user = role == "user";
    if (user && system && format_->system_turn)
        pieces.insert(pieces.end(), {{start + "system\n", false}, {*system, true}, {end + "\n", false}});
    pieces.push_back({start + std::string(user ? "user" : format_->assistant_role) + "\n", false});
    if (user && system && !format_->system_turn) {
        pieces.push_back({*system, true});
        pieces.push_back({"\n\n", false});
    }
    pieces.push_back({std::string(message), true});
    pieces.push_back({end + "\n", false});
}

void ChatTemplate::append_answer_header(std::vector<Piece>& pieces) const {
    pieces.push_back({std::string(format_->turn_start) + std::string(format_->assistant_role) + "\n", false});
}

std::vector<int32_t> ChatTemplate::encode(const std::vector<Piece>& pieces, bool parse_special) const {
    std::vector<int32_t> tokens;
    auto append = [&](const std::vector<int32_t>& more) { tokens.insert(tokens.end(), more.begin(), more.end()); };
    if (parse_special) {
        std::string text;
        for (const Piece& piece : pieces) text += piece.text;
        append(tokenizer_.encode(text, /*add_bos=*/false));
        return tokens;
    }
    // Cut where a message starts and ends: the byte-level pre-tokenizer cuts at the newline that ends each
    // header anyway, so for an ordinary message these are the tokens of the whole rendered text (the chat CLI
    // and server tests hold them to HF's encoding of it).
    for (const Piece& piece : pieces)
        append(piece.from_user ? tokenizer_.encode_text(piece.text) : tokenizer_.encode(piece.text, /*add_bos=*/false));
    return tokens;
}

std::vector<int32_t> ChatTemplate::conversation_tokens(const std::vector<ChatMessage>& messages) const {
    std::optional<std::string> system = default_system_;
    size_t first = 0;
    if (!messages.empty() && messages[0].role == "system") {
        system = messages[0].content;
        if (system->empty()) system.reset();
        first = 1;
    }
    std::vector<Piece> pieces;
    bool system_written = false;
    for (size_t i = first; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == "system")
            throw Error("a system message must come first: message " + std::to_string(i) + " is one");
        if (m.role != "user" && m.role != "assistant")
            throw Error("message " + std::to_string(i) + " has the role '" + m.role +
                        "'; kvx knows system, user and assistant");
        const bool with_system = !system_written && m.role == "user";
        append_turn(pieces, m.role, m.content, with_system ? system : std::nullopt);
        system_written = system_written || with_system;
    }
    append_answer_header(pieces);
    std::vector<int32_t> tokens;
    if (bos_ >= 0) tokens.push_back(bos_);
    const std::vector<int32_t> rest = encode(pieces);
    tokens.insert(tokens.end(), rest.begin(), rest.end());
    return tokens;
}

}  // namespace kvx
