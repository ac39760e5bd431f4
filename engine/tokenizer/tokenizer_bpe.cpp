#include "engine/tokenizer/tokenizer_bpe.h"

#include <unordered_set>

#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/utf8.h"
#include "kernels/error.h"

namespace kvx {
namespace {

std::vector<AddedToken> non_special(const std::vector<AddedToken>& tokens) {
    std::vector<AddedToken> kept;
    for (const AddedToken& t : tokens)
        if (!t.special) kept.push_back(t);
    return kept;
}

}  // namespace

BpeTokenizer::BpeTokenizer(const BpeTokenizerSpec& spec)
    : source_(spec.source),
      model_(spec.model, spec.source),
      pre_tokenizer_(spec.pre_tokenizer),
      added_tokens_(spec.added_tokens),
      plain_added_tokens_(non_special(spec.added_tokens)),
      prefix_ids_(spec.prefix_ids) {
    // A token's text maps back through the byte-level alphabet when all its characters are in it, else it
    // is its own UTF-8 (added tokens such as a run of spaces); HF's ByteLevel decoder does the same.
    auto bytes_of = [](const std::string& text) { return byte_level::bytes_of_text(text).value_or(text); };
    std::unordered_set<int32_t> ids;
    auto set_bytes = [&](int32_t id, std::string bytes) {
        if (static_cast<size_t>(id) >= token_bytes_.size()) token_bytes_.resize(static_cast<size_t>(id) + 1);
        token_bytes_[static_cast<size_t>(id)] = std::move(bytes);
        ids.insert(id);
    };
    for (const auto& [text, id] : spec.model.vocab) set_bytes(id, bytes_of(text));
    for (const AddedToken& t : spec.added_tokens) set_bytes(t.id, bytes_of(t.content));  // added ones win, as in HF
    n_tokens_ = ids.size();
    for (int32_t id : prefix_ids_)
        if (!ids.contains(id))
            throw Error(source_ + ": the post-processor adds token id " + std::to_string(id) + ", which no token has");
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, bool add_bos) const {
    return encode_with(added_tokens_, text, add_bos);
}

std::vector<int32_t> BpeTokenizer::encode_text(std::string_view text) const {
    return encode_with(plain_added_tokens_, text, false);
}

std::vector<int32_t> BpeTokenizer::encode_with(const AddedTokens& added, std::string_view text, bool add_bos) const {
    if (const size_t bad = utf8_invalid_at(text); bad < text.size())
        throw Error("the text is not valid UTF-8 (byte " + std::to_string(bad) + " of " + std::to_string(text.size()) + ")");
    std::vector<int32_t> ids;
    if (add_bos) ids = prefix_ids_;
    ids.reserve(ids.size() + text.size() / 3);
    const PreTokenizer::WordSink encode_word = [&](std::string_view word) { model_.encode_word(word, ids); };
    added.split(
        text, [&](std::string_view plain) { pre_tokenizer_.for_each_word(plain, encode_word); },
        [&](int32_t id) { ids.push_back(id); });
    return ids;
}

std::string BpeTokenizer::decode(int32_t /*prev_token*/, int32_t token) const {
    if (token < 0 || static_cast<size_t>(token) >= token_bytes_.size()) return {};
    return token_bytes_[static_cast<size_t>(token)];
}

}  // namespace kvx
