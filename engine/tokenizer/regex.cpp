#include "engine/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "engine/tokenizer/utf8.h"
#include "kernels/error.h"

namespace kvx {
namespace {

std::string pcre2_message(int code) {
    PCRE2_UCHAR buffer[256];
    pcre2_get_error_message(code, buffer, sizeof buffer);
    return reinterpret_cast<const char*>(buffer);
}

std::string from_oniguruma(std::string_view pattern) {
    std::string out;
    out.reserve(pattern.size() + 32);
    for (size_t i = 0; i < pattern.size(); ++i) {
        if (pattern[i] != '\\' || i + 1 == pattern.size()) {
            out += pattern[i];
            continue;
        }
        const char escaped = pattern[++i];  // escapes are two characters; "\\s" is a backslash, then 's'
        if (escaped == 's') out += "\\p{White_Space}";
        else if (escaped == 'S') out += "\\P{White_Space}";
        else (out += '\\') += escaped;
    }
    return out;
}

// One match data block per thread, holding the offsets of the whole match only: the tokenizers never read
// capture groups, and PCRE2 still reports the whole match when the block is smaller than the pattern's
// group count.
struct ThreadMatchData {
    pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
    ~ThreadMatchData() { pcre2_match_data_free(data); }
};

pcre2_match_data* thread_match_data() {
    thread_local ThreadMatchData m;
    if (!m.data) throw Error("out of memory for a regex match");
    return m.data;
}

}  // namespace

Regex::Regex(std::string_view pattern, Syntax syntax)
    : pattern_(syntax == Syntax::Oniguruma ? from_oniguruma(pattern) : std::string(pattern)) {
    // PCRE2_LITERAL refuses PCRE2_UCP, which a literal needs no more than it needs a pattern syntax.
    const uint32_t options = PCRE2_UTF | (syntax == Syntax::Literal ? PCRE2_LITERAL : PCRE2_UCP);
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(), options, &error,
                          &error_offset, nullptr);
    if (!code_)
        throw Error("bad regex '" + pattern_ + "' at offset " + std::to_string(error_offset) + ": " +
                    pcre2_message(error));
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // where JIT is unavailable, matching interprets
}

Regex::~Regex() { pcre2_code_free(code_); }

bool Regex::find(std::string_view text, size_t from, size_t& begin, size_t& end) const {
    pcre2_match_data* match = thread_match_data();
    const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), from,
                               PCRE2_NO_UTF_CHECK, match, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    if (rc < 0) throw Error("regex '" + pattern_ + "' failed on a text of " + std::to_string(text.size()) +
                            " bytes: " + pcre2_message(rc));
    const PCRE2_SIZE* offsets = pcre2_get_ovector_pointer(match);
    begin = offsets[0];
    end = offsets[1];
    return true;
}

bool Regex::matches_char(char32_t code_point) const {
    std::string one;
    utf8_append(one, code_point);
    size_t begin = 0, end = 0;
    return find(one, 0, begin, end) && begin == 0 && end == one.size();
}

}  // namespace kvx
