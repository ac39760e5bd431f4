#include "engine/serving/stop_strings.h"

#include <algorithm>
#include <utility>

#include "engine/tokenizer/utf8.h"

namespace kvx {
namespace {

// Bytes at the end of s that start a UTF-8 character whose continuation bytes have not arrived yet.
size_t unfinished_utf8_tail(const std::string& s) {
    for (size_t back = 1; back <= std::min<size_t>(3, s.size()); ++back) {
        const auto byte = static_cast<unsigned char>(s[s.size() - back]);
        if ((byte & 0xC0) == 0x80) continue;  // a continuation byte: look further back for the lead
        const size_t length = utf8_sequence_length(byte);
        return length > back ? back : 0;
    }
    return 0;
}

}  // namespace

StopStrings::StopStrings(std::vector<std::string> stops) {
    for (std::string& s : stops)
        if (!s.empty()) stops_.push_back(std::move(s));
}

std::string StopStrings::feed(std::string_view piece) {
    if (matched_) return {};
    held_ += piece;
    size_t cut = std::string::npos;
    for (const std::string& s : stops_) cut = std::min(cut, held_.find(s));
    if (cut != std::string::npos) {
        matched_ = true;
        std::string out = held_.substr(0, cut);
        held_.clear();
        return out;
    }
    // Hold back the longest tail that is a proper prefix of some stop string.
    size_t keep = 0;
    for (const std::string& s : stops_)
        for (size_t len = std::min(s.size() - 1, held_.size()); len > keep; --len)
            if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
                keep = len;
                break;
            }
    // And an unfinished UTF-8 character: a byte-level token may carry part of one, and JSON carries only whole ones.
    keep = std::max(keep, unfinished_utf8_tail(held_));
    std::string out = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return out;
}

std::string StopStrings::flush() {
    std::string out;
    if (!matched_) out.swap(held_);
    return out;
}

}  // namespace kvx
