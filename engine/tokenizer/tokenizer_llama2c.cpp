#include "engine/tokenizer/tokenizer_llama2c.h"

#include <algorithm>
#include <limits>
#include <queue>

#include "engine/tokenizer/tokenizer_llama2c_file.h"
#include "engine/tokenizer/utf8.h"
#include "kernels/error.h"

namespace kvx {

Llama2cTokenizer::Llama2cTokenizer(const std::string& path, int vocab_size, int bos_id, SentencePieceOptions options)
    : Llama2cTokenizer(read_llama2c_vocabulary(path, vocab_size), bos_id, std::move(options), "tokenizer '" + path + "'") {}

Llama2cTokenizer::Llama2cTokenizer(Llama2cVocabulary vocab, int bos_id, SentencePieceOptions options,
                                   const std::string& source)
    : pieces_(std::move(vocab.pieces)),
      scores_(std::move(vocab.scores)),
      bos_id_(bos_id),
      add_bos_(options.add_bos),
      add_dummy_prefix_(options.add_dummy_prefix) {
    if (pieces_.size() != scores_.size())
        throw Error(source + " has " + std::to_string(pieces_.size()) + " pieces but " + std::to_string(scores_.size()) +
                    " scores");
    std::fill(std::begin(byte_ids_), std::end(byte_ids_), -1);
    for (size_t id = 0; id < pieces_.size(); ++id) {
        max_piece_bytes_ = std::max(max_piece_bytes_, pieces_[id].size());
        ids_.emplace(pieces_[id], static_cast<int32_t>(id));
        const int byte = parse_byte_piece(pieces_[id]);
        if (byte >= 0 && byte_ids_[byte] < 0) byte_ids_[byte] = static_cast<int32_t>(id);
    }
    auto piece_of = [&](int32_t id, const char* what) -> const std::string& {
        if (id < 0 || static_cast<size_t>(id) >= pieces_.size())
            throw Error(source + ": " + what + " token id " + std::to_string(id) + " is not one of its " +
                        std::to_string(pieces_.size()) + " pieces");
        return pieces_[static_cast<size_t>(id)];
    };
    if (bos_id_ != -1) piece_of(bos_id_, "BOS");
    for (int32_t id : options.user_defined_ids) {
        const std::string& piece = piece_of(id, "user-defined");
        user_defined_.add(piece, id);
        user_defined_and_control_.add(piece, id);
    }
    for (int32_t id : options.control_ids) user_defined_and_control_.add(piece_of(id, "control"), id);
}

int32_t Llama2cTokenizer::lookup(std::string_view piece) const {
    auto it = ids_.find(piece);
    return it == ids_.end() ? -1 : it->second;
}

std::vector<int32_t> Llama2cTokenizer::encode(std::string_view text, bool add_bos) const {
    return encode_with(user_defined_and_control_, text, add_bos);
}

std::vector<int32_t> Llama2cTokenizer::encode_text(std::string_view text) const {
    return encode_with(user_defined_, text, false);
}

std::vector<int32_t> Llama2cTokenizer::encode_with(const WholePieces& whole, std::string_view text, bool add_bos) const {
    std::vector<int32_t> tokens;
    if (add_bos && add_bos_ && bos_id_ >= 0) tokens.push_back(bos_id_);
    // The merge numbers symbols with int32 (half the memory of size_t); a text has at most one per byte.
    if (text.size() >= static_cast<size_t>(std::numeric_limits<int32_t>::max()))
        throw Error("a text of " + std::to_string(text.size()) + " bytes is too long to tokenise at once");
    // Every run of text starts the text or follows a whole piece, so each gets the dummy prefix (split), as
    // llama.cpp gives it to every run after a special token.
    size_t run_from = 0;
    for (size_t at = 0; at < text.size() && !whole.empty();) {
        const WholePieces::Match m = whole.at(text, at);
        if (m.id < 0) {
            ++at;
            continue;
        }
        if (run_from < at) encode_run(text.substr(run_from, at - run_from), tokens);
        tokens.push_back(m.id);
        at += m.length;
        run_from = at;
    }
    if (run_from < text.size()) encode_run(text.substr(run_from), tokens);
    return tokens;
}

void Llama2cTokenizer::encode_run(std::string_view run, std::vector<int32_t>& out) const {
    std::vector<int32_t> merged = split(run);
    merge(merged);
    out.insert(out.end(), merged.begin(), merged.end());
}

std::vector<int32_t> Llama2cTokenizer::split(std::string_view text) const {
    std::vector<int32_t> tokens;
    tokens.reserve(text.size() + 1);
    // SentencePiece adds a space in front of the text so that its first word is tokenised like any other,
    // unless the model says not to (add_dummy_prefix false: Gemma).
    if (add_dummy_prefix_) {
        const int32_t space = lookup(" ");
        if (space >= 0) tokens.push_back(space);
    }

    // One token per UTF-8 code point when the vocabulary has it, else one byte-fallback token per byte.
    for (size_t i = 0; i < text.size();) {
        size_t len = utf8_sequence_length(static_cast<unsigned char>(text[i]));
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
    return tokens;
}

namespace {

// A symbol of the text being merged: a node of a doubly linked list kept in a vector in text order, so
// that of two symbols the one with the smaller index is further left. A merge keeps the left node.
struct Symbol {
    int32_t token;
    int32_t prev;  // -1 at the start
    int32_t next;  // -1 at the end
};

// An adjacent pair whose union is a piece, as it was when queued. It is stale once either side has merged
// with something else since: a merge changes a symbol's token (the union is longer than either piece, so
// never the same piece) and unlinks its right neighbour.
struct Candidate {
    float score;        // of the merged piece
    int32_t left;       // symbol indices
    int32_t right;
    int32_t left_token;  // the tokens when queued
    int32_t right_token;
    int32_t merged;     // the piece they make
};

// std::priority_queue pops its largest: the higher score, then the further left, which is the pair a
// left-to-right scan keeping only strictly better scores picks.
struct PopsFirst {
    bool operator()(const Candidate& a, const Candidate& b) const {
        return a.score != b.score ? a.score < b.score : a.left > b.left;
    }
};

}  // namespace

// The greedy merge of llama2.c's run.c (merge the best-scoring adjacent pair, the leftmost among equals,
// until no pair is a piece), without its rescan of every pair after each merge. Every adjacent pair that
// is a piece has a queue entry, made when the two became neighbours or either last changed; the best valid
// entry is the pair the rescan would pick, and entries a merge has made stale are skipped when popped.
// Each merge queues at most two pairs: O(n log n) for n symbols.
void Llama2cTokenizer::merge(std::vector<int32_t>& tokens) const {
    const auto n = static_cast<int32_t>(tokens.size());
    std::vector<Symbol> symbols(tokens.size());  // [n]
    for (int32_t i = 0; i < n; ++i) symbols[static_cast<size_t>(i)] = {tokens[static_cast<size_t>(i)], i - 1, i + 1 < n ? i + 1 : -1};

    std::string joined;  // the two pieces of a pair, reused
    auto candidate = [&](int32_t left, int32_t right, Candidate& out) {
        const Symbol& l = symbols[static_cast<size_t>(left)];
        const Symbol& r = symbols[static_cast<size_t>(right)];
        const std::string& a = pieces_[static_cast<size_t>(l.token)];
        const std::string& b = pieces_[static_cast<size_t>(r.token)];
        if (a.size() + b.size() > max_piece_bytes_) return false;
        joined.assign(a).append(b);
        const int32_t id = lookup(joined);
        if (id < 0) return false;
        out = {scores_[static_cast<size_t>(id)], left, right, l.token, r.token, id};
        return true;
    };

    std::vector<Candidate> initial;  // [<= n - 1] the pairs of the unmerged text
    initial.reserve(tokens.size());
    for (int32_t i = 0; i + 1 < n; ++i)
        if (Candidate c; candidate(i, i + 1, c)) initial.push_back(c);
    std::priority_queue<Candidate, std::vector<Candidate>, PopsFirst> queue(PopsFirst{}, std::move(initial));
    auto push = [&](int32_t left, int32_t right) {
        if (Candidate c; candidate(left, right, c)) queue.push(c);
    };

    while (!queue.empty()) {
        const Candidate c = queue.top();
        queue.pop();
        Symbol& l = symbols[static_cast<size_t>(c.left)];
        Symbol& r = symbols[static_cast<size_t>(c.right)];
        if (l.next != c.right || l.token != c.left_token || r.token != c.right_token) continue;  // stale
        l.token = c.merged;
        l.next = r.next;
        if (r.next >= 0) symbols[static_cast<size_t>(r.next)].prev = c.left;
        r = {-1, -1, -1};  // unlinked; no valid entry names it again
        if (l.prev >= 0) push(l.prev, c.left);
        if (l.next >= 0) push(c.left, l.next);
    }

    tokens.clear();
    for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = symbols[static_cast<size_t>(i)].next)  // symbol 0 is never unlinked
        tokens.push_back(symbols[static_cast<size_t>(i)].token);
}

std::string Llama2cTokenizer::decode(int32_t prev_token, int32_t token) const {
    if (token == bos_id_) return {};  // a marker, not text
    std::string_view p = piece(token);
    // Only a space encode put there is dropped: without the dummy prefix a leading space is the text's own.
    if (add_dummy_prefix_ && prev_token == bos_id_ && !p.empty() && p[0] == ' ') p.remove_prefix(1);
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
