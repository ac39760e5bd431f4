// The pre-tokenizer of a byte-level BPE tokenizer: it cuts text into the words that BPE merges within (merges
// never cross a word boundary). It is HF tokenizers' chain of splitters run in order, each on every piece
// the previous one left:
//
//   Split(regex, behavior, invert)   cut at a pattern's matches (Digits is a Split on \p{N} or \p{N}+)
//   PrefixSpace                       ByteLevel's add_prefix_space: " " in front of a piece lacking one
//   Split(GPT-2 pattern, Isolated)    ByteLevel's use_regex
//
// ByteLevel's mapping of bytes to its alphabet is not done here: the BPE model works on raw bytes.
#pragma once

#include <functional>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/tokenizer/regex.h"

namespace kvx {

// What becomes of a match and of the text around it (HF's SplitDelimiterBehavior).
enum class SplitBehavior {
    Removed,             // matches are dropped
    Isolated,            // every match and every gap between matches is a piece
    MergedWithPrevious,  // a match joins the piece before it
    MergedWithNext,      // a match joins the piece after it
    Contiguous,          // consecutive matches form one piece
};

// GPT-2's pattern, ByteLevel's use_regex: contractions, letters, numbers, other symbols (each group taking a
// leading space), and whitespace runs that leave their last space to the word after them.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct PreTokenizerStep {
    enum class Kind { Split, PrefixSpace } kind = Kind::Split;
    std::shared_ptr<const Regex> regex;  // Split only
    SplitBehavior behavior = SplitBehavior::Isolated;
    bool invert = false;  // the pattern describes the pieces, not the separators
};

class PreTokenizer {
public:
    using WordSink = std::function<void(std::string_view word)>;

    explicit PreTokenizer(std::vector<PreTokenizerStep> steps) : steps_(std::move(steps)) {}

    // Calls `word` for each non-empty word of `text` (valid UTF-8), in order. A word may live in a scratch
    // buffer (after PrefixSpace): it is valid during the call only.
    void for_each_word(std::string_view text, const WordSink& word) const { run(0, text, word); }

private:
    void run(size_t step, std::string_view piece, const WordSink& word) const;

    std::vector<PreTokenizerStep> steps_;
};

// The pieces of `text` under `behavior`, as [begin, end) byte ranges in order, empty pieces left out.
std::vector<std::pair<size_t, size_t>> split_pieces(std::string_view text, const Regex& regex,
                                                    SplitBehavior behavior, bool invert);

}  // namespace kvx
