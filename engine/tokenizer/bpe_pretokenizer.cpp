#include "engine/tokenizer/bpe_pretokenizer.h"

#include <algorithm>
#include <string>

#include "engine/tokenizer/utf8.h"

namespace kvx {
namespace {

struct Segment {
    size_t begin, end;
    bool is_match;
};

// The text cut into matches and the gaps between them, covering it whole. After an empty match the search
// moves on by one character, and an empty match right where the previous match ended is not one, as in the
// regex engines HF uses.
std::vector<Segment> segments(std::string_view text, const Regex& regex) {
    std::vector<Segment> out;
    size_t gap_from = 0, search_from = 0, begin = 0, end = 0;
    bool previous_nonempty_ends_here = false;
    while (search_from <= text.size() && regex.find(text, search_from, begin, end)) {
        if (begin == end) {
            if (!(previous_nonempty_ends_here && begin == gap_from)) {
                if (gap_from < begin) out.push_back({gap_from, begin, false});
                out.push_back({begin, end, true});
                gap_from = end;
            }
            if (begin == text.size()) break;
            size_t next = begin;
            utf8_next(text, next);
            search_from = next;
            previous_nonempty_ends_here = false;
            continue;
        }
        if (gap_from < begin) out.push_back({gap_from, begin, false});
        out.push_back({begin, end, true});
        gap_from = search_from = end;
        previous_nonempty_ends_here = true;
    }
    if (gap_from < text.size()) out.push_back({gap_from, text.size(), false});
    return out;
}

}  // namespace

std::vector<std::pair<size_t, size_t>> split_pieces(std::string_view text, const Regex& regex,
                                                    SplitBehavior behavior, bool invert) {
    std::vector<Segment> parts = segments(text, regex);
    if (invert)
        for (Segment& s : parts) s.is_match = !s.is_match;
    std::vector<std::pair<size_t, size_t>> pieces;
    pieces.reserve(parts.size());
    switch (behavior) {
    case SplitBehavior::Isolated:
        for (const Segment& s : parts) pieces.emplace_back(s.begin, s.end);
        break;
    case SplitBehavior::Removed:
        for (const Segment& s : parts)
            if (!s.is_match) pieces.emplace_back(s.begin, s.end);
        break;
    case SplitBehavior::Contiguous: {
        bool previous_match = false;
        for (const Segment& s : parts) {
            if (!pieces.empty() && s.is_match == previous_match) pieces.back().second = s.end;
            else pieces.emplace_back(s.begin, s.end);
            previous_match = s.is_match;
        }
        break;
    }
    case SplitBehavior::MergedWithPrevious: {
        bool previous_match = false;
        for (const Segment& s : parts) {
            if (!pieces.empty() && s.is_match && !previous_match) pieces.back().second = s.end;
            else pieces.emplace_back(s.begin, s.end);
            previous_match = s.is_match;
        }
        break;
    }
    case SplitBehavior::MergedWithNext: {
        // The mirror image of MergedWithPrevious: walk backwards, a match joins the piece after it.
        bool next_match = false;
        for (size_t k = parts.size(); k-- > 0;) {
            const Segment& s = parts[k];
            if (!pieces.empty() && s.is_match && !next_match) pieces.back().first = s.begin;
            else pieces.emplace_back(s.begin, s.end);
            next_match = s.is_match;
        }
        std::reverse(pieces.begin(), pieces.end());
        break;
    }
    }
    std::erase_if(pieces, [](const auto& p) { return p.first == p.second; });
    return pieces;
}

void PreTokenizer::run(size_t step, std::string_view piece, const WordSink& word) const {
    if (piece.empty()) return;
    if (step == steps_.size()) {
        word(piece);
        return;
    }
    const PreTokenizerStep& s = steps_[step];
    if (s.kind == PreTokenizerStep::Kind::PrefixSpace) {
        if (piece.front() == ' ') return run(step + 1, piece, word);
        std::string prefixed;
        prefixed.reserve(piece.size() + 1);
        prefixed += ' ';
        prefixed += piece;
        return run(step + 1, prefixed, word);
    }
    for (const auto& [begin, end] : split_pieces(piece, *s.regex, s.behavior, s.invert))
        run(step + 1, piece.substr(begin, end - begin), word);
}

}  // namespace kvx
