#include "engine/tokenizer/bpe_added_tokens.h"

#include <algorithm>
#include <cstdio>

#include "engine/tokenizer/utf8.h"

namespace kvx {
namespace {

// A PCRE2 pattern matching `content` literally: ASCII other than letters and digits as \x{..} escapes,
// everything else as itself.
std::string literal_pattern(std::string_view content) {
    std::string out;
    for (char c : content) {
        const auto u = static_cast<unsigned char>(c);
        if (u >= 0x80 || (u >= '0' && u <= '9') || (u >= 'A' && u <= 'Z') || (u >= 'a' && u <= 'z')) {
            out += c;
        } else {
            char escaped[8];
            std::snprintf(escaped, sizeof escaped, "\\x{%02x}", u);
            out += escaped;
        }
    }
    return out;
}

}  // namespace

AddedTokens::AddedTokens(const std::vector<AddedToken>& tokens)
    : word_char_(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}])", Regex::Syntax::Pcre2),
      white_space_(R"(\p{White_Space})", Regex::Syntax::Pcre2) {
    for (const AddedToken& t : tokens)
        if (!t.content.empty()) (t.normalized ? normalized_ : raw_).by_content.insert_or_assign(t.content, t);
    for (Pass* pass : {&raw_, &normalized_}) {
        if (pass->by_content.empty()) continue;
        std::vector<std::string_view> contents;
        for (const auto& entry : pass->by_content) contents.push_back(entry.first);
        // Longest first, so that among matches starting at one place PCRE2's first alternative is the
        // longest; ties broken by content to keep the pattern the same from run to run.
        std::sort(contents.begin(), contents.end(), [](std::string_view a, std::string_view b) {
            return a.size() != b.size() ? a.size() > b.size() : a < b;
        });
        std::string pattern;
        for (std::string_view c : contents) (pattern += pattern.empty() ? "" : "|") += literal_pattern(c);
        pass->any = std::make_unique<Regex>(pattern, Regex::Syntax::Pcre2);
    }
}

void AddedTokens::split(std::string_view text, const TextSink& on_text, const TokenSink& on_token) const {
    split_pass(raw_, text, [&](std::string_view rest) { split_pass(normalized_, rest, on_text, on_token); },
               on_token);
}

void AddedTokens::split_pass(const Pass& pass, std::string_view text, const TextSink& on_text,
                             const TokenSink& on_token) const {
    if (text.empty()) return;
    if (!pass.any) return on_text(text);
    size_t text_from = 0, search_from = 0, begin = 0, end = 0;
    while (search_from < text.size() && pass.any->find(text, search_from, begin, end)) {
        search_from = end;  // the next match starts after this one, even where this one is dropped
        const AddedToken& token = pass.by_content.at(std::string(text.substr(begin, end - begin)));
        if (token.single_word) {
            size_t before = begin, after = end;
            const bool word_before = begin > 0 && word_char_.matches_char(utf8_prev(text, before));
            const bool word_after = end < text.size() && word_char_.matches_char(utf8_next(text, after));
            if (word_before || word_after) continue;
        }
        size_t start = begin, stop = end;
        if (token.lstrip) {
            size_t at = begin;
            for (size_t p = at; p > 0 && white_space_.matches_char(utf8_prev(text, p));) at = p;
            start = std::max(at, text_from);  // whitespace the previous token took stays with it
        }
        if (token.rstrip) {
            for (size_t p = stop; p < text.size() && white_space_.matches_char(utf8_next(text, p));) stop = p;
        }
        if (text_from < start) on_text(text.substr(text_from, start - text_from));
        on_token(token.id);
        text_from = stop;
    }
    if (text_from < text.size()) on_text(text.substr(text_from));
}

}  // namespace kvx
