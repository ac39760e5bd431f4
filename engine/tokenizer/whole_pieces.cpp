#include "engine/tokenizer/whole_pieces.h"

#include <algorithm>

namespace kvx {

void WholePieces::add(std::string_view piece, int32_t id) {
    if (piece.empty()) return;
    ids_.emplace(std::string(piece), id);  // the first id given a piece keeps it, as in the vocabulary's lookup
    std::vector<size_t>& lengths = lengths_[static_cast<unsigned char>(piece[0])];
    const auto it = std::lower_bound(lengths.begin(), lengths.end(), piece.size(), std::greater<>());
    if (it == lengths.end() || *it != piece.size()) lengths.insert(it, piece.size());
}

WholePieces::Match WholePieces::at(std::string_view text, size_t at) const {
    if (at >= text.size()) return {};
    for (size_t length : lengths_[static_cast<unsigned char>(text[at])]) {
        if (length > text.size() - at) continue;
        const auto it = ids_.find(text.substr(at, length));
        if (it != ids_.end()) return {it->second, length};
    }
    return {};
}

}  // namespace kvx
