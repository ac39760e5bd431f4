#include "engine/tokenizer/tokenizer_llama2c.h"

#include <algorithm>
#include <limits>

#include "engine/tokenizer/tokenizer_llama2c_file.h"
#include "kernels/error.h"

namespace kvx {

Llama2cTokenizer::Llama2cTokenizer(const std::string& path, int vocab_size, int bos_id) : bos_id_(bos_id) {
    Llama2cVocabulary vocab = read_llama2c_vocabulary(path, vocab_size);
    pieces_ = std::move(vocab.pieces);
    scores_ = std::move(vocab.scores);
    std::fill(std::begin(byte_ids_), std::end(byte_ids_), -1);
    for (size_t id = 0; id < pieces_.size(); ++id) {
        ids_.emplace(pieces_[id], static_cast<int32_t>(id));
        const int byte = parse_byte_piece(pieces_[id]);
        if (byte >= 0 && byte_ids_[byte] < 0) byte_ids_[byte] = static_cast<int32_t>(id);
    }
}

int32_t Llama2cTokenizer::lookup(std::string_view piece) const {
    auto it = ids_.find(std::string(piece));
    return it == ids_.end() ? -1 : it->second;
}

std::vector<int32_t> Llama2cTokenizer::encode(std::string_view text, bool add_bos) const {
    std::vector<int32_t> tokens;
    if (add_bos && bos_id_ >= 0) tokens.push_back(bos_id_);
    if (text.empty()) return tokens;
    const size_t first = tokens.size();

    // SentencePiece adds a space in front of the text so that its first word is tokenised like any other.
    const int32_t space = lookup(" ");
    if (space >= 0) tokens.push_back(space);

    // One token per UTF-8 code point when the vocabulary has it, else one byte-fallback token per byte.
    for (size_t i = 0; i < text.size();) {
        const auto lead = static_cast<unsigned char>(text[i]);
        size_t len = 1;
        if (lead >= 0xF0) len = 4;
        else if (lead >= 0xE0) len = 3;
        else if (lead >= 0xC0) len = 2;
        while (len > 1 && (i + len > text.size())) --len;
        for (size_t k = 1; k < len; ++k)
            if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) { len = k; break; }
        const int32_t id = lookup(text.substr(i, len));
        if (id >= 0) {
            tokens.push_back(id);
        } else {
            for (size_t k = 0; k < len; ++k) {
                const int32_t byte_id = byte_ids_[static_cast<unsigned char>(text[i + k])];
                if (byte_id < 0) throw Error("the tokenizer cannot encode byte " + std::to_string(static_cast<unsigned char>(text[i + k])));
                tokens.push_back(byte_id);
            }
        }
        i += len;
    }

    // Merge the adjacent pair whose union scores highest, until no pair is in the vocabulary.
    std::string merged;
    for (;;) {
        float best_score = -std::numeric_limits<float>::infinity();
        int32_t best_id = -1;
        size_t best_at = 0;
        for (size_t i = first; i + 1 < tokens.size(); ++i) {
            merged = piece(tokens[i]);
            merged += piece(tokens[i + 1]);
            const int32_t id = lookup(merged);
            if (id >= 0 && scores_[static_cast<size_t>(id)] > best_score) {
                best_score = scores_[static_cast<size_t>(id)];
                best_id = id;
                best_at = i;
            }
        }
        if (best_id < 0) break;
        tokens[best_at] = best_id;
        tokens.erase(tokens.begin() + static_cast<std::ptrdiff_t>(best_at) + 1);
    }
    return tokens;
}

std::string Llama2cTokenizer::decode(int32_t prev_token, int32_t token) const {
    if (token == bos_id_) return {};  // a marker, not text
    std::string_view p = piece(token);
    if (prev_token == bos_id_ && !p.empty() && p[0] == ' ') p.remove_prefix(1);
    const int byte = parse_byte_piece(p);
    if (byte >= 0) {
        const bool control = byte < 0x20 || byte == 0x7F;
        const bool whitespace = byte == '\t' || byte == '\n' || byte == '\r' || byte == '\v' || byte == '\f';
        if (control && !whitespace) return {};
        return std::string(1, static_cast<char>(byte));
    }
    return std::string(p);
}

}  // namespace kvx
