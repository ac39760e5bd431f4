#include "engine/model/chat_format_markers.h"

#include <optional>
#include <string>

#include "engine/model/chat_format.h"

namespace kvx {
namespace {

constexpr std::string_view kImStart = "<|im_start|>", kImEnd = "<|im_end|>";
constexpr std::string_view kTurnStart = "<start_of_turn>", kTurnEnd = "<end_of_turn>";

bool has(std::string_view text, std::string_view marker) { return text.find(marker) != std::string_view::npos; }

// The template without its {# comments #}, which may name any marker.
std::string without_comments(std::string_view jinja) {
    std::string out;
    for (size_t at = 0; at < jinja.size();) {
        const size_t open = jinja.find("{#", at);
        if (open == std::string_view::npos) {
            out.append(jinja.substr(at));
            break;
        }
        out.append(jinja.substr(at, open - at));
        const size_t close = jinja.find("#}", open + 2);
        at = close == std::string_view::npos ? jinja.size() : close + 2;
    }
    return out;
}

// Whether the template's first output is {{ bos_token }} (any whitespace control), nothing before it.
bool starts_with_bos(std::string_view t) {
    const size_t first = t.find_first_not_of(" \t\r\n");
    if (first == std::string_view::npos || t.substr(first, 2) != "{{") return false;
    size_t at = first + 2;
    if (at < t.size() && (t[at] == '-' || t[at] == '+')) ++at;
    at = t.find_first_not_of(" \t\r\n", at);
    if (at == std::string_view::npos || t.substr(at, 9) != "bos_token") return false;
    at = t.find_first_not_of(" \t\r\n", at + 9);
    if (at != std::string_view::npos && t[at] == '-') ++at;
    return at != std::string_view::npos && t.substr(at, 2) == "}}";
}

// The text after "<|im_start|>system" + newline up to <|im_end|>, where it is all literal (a Jinja string's
// "\n" escapes read as newlines); nullopt where it is built from expressions.
std::optional<std::string> literal_system(std::string_view t, size_t after_marker) {
    size_t at = after_marker;
    if (t.substr(at, 1) == "\n") at += 1;
    else if (t.substr(at, 2) == "\\n") at += 2;
    else return std::nullopt;
    const size_t end = t.find(kImEnd, at);
    if (end == std::string_view::npos) return std::nullopt;
    std::string text;
    for (size_t i = at; i < end; ++i) {
        const char c = t[i];
        if (c == '\'' || c == '"' || c == '{' || c == '}') return std::nullopt;
        if (c == '\\') {
            if (i + 1 < end && t[i + 1] == 'n') {
                text += '\n';
                ++i;
                continue;
            }
            return std::nullopt;
        }
        text += c;
    }
    return text;
}

ChatConfig refused(std::string reason) {
    ChatConfig c;
    c.unsupported_reason = std::move(reason);
    return c;
}

}  // namespace

ChatConfig recognise_chat_template(std::string_view jinja) {
    const std::string t = without_comments(jinja);
    const std::string formats(chat_format_names());
    const bool chatml = has(t, kImStart) && has(t, kImEnd);
    const bool gemma = has(t, kTurnStart) && has(t, kTurnEnd);
    if (has(t, "<|start_header_id|>"))
        return refused("its turns are Llama 3's (<|start_header_id|>); kvx applies " + formats);
    if (chatml && gemma) return refused("it writes both ChatML's and Gemma's turn markers");
    if (!chatml && !gemma)
        return refused("it writes the turn markers of none of the formats kvx applies (" + formats + ")");
    if (has(t, "<think>")) return refused("it writes <think> sections, which change the turns kvx would write");

    ChatConfig c;
    if (has(t, "bos_token")) {
        if (!starts_with_bos(t)) return refused("it writes bos_token other than as its first output");
        c.add_bos = true;
    }
    if (gemma) {
        if (!has(t, "trim")) return refused("its turns are Gemma's but it does not trim messages as Gemma's does");
        if (!has(t, "model")) return refused("its turns are Gemma's but it names no 'model' role");
        c.format = "gemma";
        return c;
    }
    c.format = "chatml";
    const std::string system_head = std::string(kImStart) + "system";
    for (size_t at = t.find(system_head); at != std::string::npos; at = t.find(system_head, at + 1)) {
        const std::optional<std::string> text = literal_system(t, at + system_head.size());
        if (!text) continue;
        if (c.has_default_system && c.default_system != *text)
            return refused("it writes more than one default system message");
        c.has_default_system = true;
        c.default_system = *text;
    }
    return c;
}

}  // namespace kvx
