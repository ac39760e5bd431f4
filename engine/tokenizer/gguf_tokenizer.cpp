#include "engine/tokenizer/gguf_tokenizer.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>
#include <unordered_map>

#include "engine/tokenizer/bpe_spec.h"
#include "engine/tokenizer/tokenizer_bpe.h"
#include "engine/tokenizer/tokenizer_llama2c.h"

namespace kvx {
namespace {

enum TokenType : int64_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

constexpr std::string_view kTokensKey = "tokenizer.ggml.tokens";
constexpr std::string_view kTypesKey = "tokenizer.ggml.token_type";

// Llama 3's and Qwen2's splits (their tokenizer.json's Split patterns, which llama.cpp's "llama-bpe" and "qwen2"
// reproduce): contractions in any case, letters with one leading non-letter, numbers in threes (Llama 3) or one
// by one (Qwen2), punctuation with its trailing newlines, newline runs, and whitespace as GPT-2's.
constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

void split_then_bytes(std::vector<PreTokenizerStep>& steps, std::string_view pattern) {
    steps.push_back({PreTokenizerStep::Kind::Split, std::make_shared<Regex>(pattern, Regex::Syntax::Oniguruma),
                     SplitBehavior::Isolated, false});
}

// A tokenizer.ggml.pre label: the pre-tokenizer it stands for and what llama.cpp sets beside it
// (llama-vocab.cpp). llama.cpp's "default" is not GPT-2's split (it cuts punctuation and digit triples first),
// so it is not here.
struct PreTokenizerLabel {
    std::string_view name;
    void (*build)(std::vector<PreTokenizerStep>&);
    bool ignore_merges;  // a word that is a token is that token, merges or not
    bool add_bos;        // llama.cpp's add_bos default for the label
};

constexpr PreTokenizerLabel kPreTokenizers[] = {
    {"gpt-2", [](auto& s) { append_byte_level_steps(s, false, true); }, false, false},
    {"smollm", [](auto& s) { append_digits_step(s, true); append_byte_level_steps(s, false, true); }, false, false},
    {"llama-bpe", [](auto& s) { split_then_bytes(s, kLlama3Pattern); }, true, true},
    {"llama3", [](auto& s) { split_then_bytes(s, kLlama3Pattern); }, true, true},
    {"llama-v3", [](auto& s) { split_then_bytes(s, kLlama3Pattern); }, true, true},
    {"qwen2", [](auto& s) { split_then_bytes(s, kQwen2Pattern); }, false, false},
};

std::string in_quotes(std::string_view key) {
    std::string out(1, '\'');
    out.append(key).push_back('\'');
    return out;
}

// The array at `key`, which must be there and hold one item per token.
template <class T>
std::vector<T> per_token(const GgufFile& f, std::string_view key, std::vector<T> items, size_t n_tokens) {
    if (!f.find(key)) f.fail("metadata " + in_quotes(key) + " is missing (the tokenizer needs it)");
    if (items.size() != n_tokens)
        f.fail("metadata " + in_quotes(key) + " has " + std::to_string(items.size()) + " items for the " +
               std::to_string(n_tokens) + " tokens of " + in_quotes(kTokensKey));
    return items;
}

// The token types, all normal when the file has none (llama.cpp reads such files).
std::vector<int64_t> token_types(const GgufFile& f, size_t n_tokens, int64_t highest_allowed) {
    if (!f.find(kTypesKey)) return std::vector<int64_t>(n_tokens, kNormal);
    std::vector<int64_t> types = per_token(f, kTypesKey, f.integers(kTypesKey), n_tokens);
    for (size_t id = 0; id < types.size(); ++id)
        if (types[id] < kNormal || types[id] > highest_allowed)
            f.fail("metadata " + in_quotes(kTypesKey) + " gives token " + std::to_string(id) + " type " +
                   std::to_string(types[id]) + " (this vocabulary has types 1.." + std::to_string(highest_allowed) + ")");
    return types;
}

// The id at `key`, `fallback` when absent; an id that is not a token is an error.
int32_t token_id(const GgufFile& f, std::string_view key, int32_t fallback, size_t n_tokens) {
    const std::optional<int64_t> id = f.integer(key);
    if (!id) return fallback;
    if (*id < 0 || static_cast<uint64_t>(*id) >= n_tokens)
        f.fail("metadata " + in_quotes(key) + " is " + std::to_string(*id) + ", not one of the " + std::to_string(n_tokens) +
               " tokens");
    return static_cast<int32_t>(*id);
}

GgufSpecialTokens special_tokens(const GgufFile& f, size_t n, int32_t bos, int32_t eos, bool add_bos) {
    GgufSpecialTokens s;
    s.bos = token_id(f, "tokenizer.ggml.bos_token_id", bos, n);
    s.eos = token_id(f, "tokenizer.ggml.eos_token_id", eos, n);
    s.eot = token_id(f, "tokenizer.ggml.eot_token_id", -1, n);
    s.eom = token_id(f, "tokenizer.ggml.eom_token_id", -1, n);
    s.add_bos = f.boolean("tokenizer.ggml.add_bos_token").value_or(add_bos);
    return s;
}

// SentencePiece writes a space as U+2581; kvx's pieces hold the space itself.
std::string with_spaces(std::string_view piece) {
    constexpr std::string_view kSpaceMark = "\xE2\x96\x81";
    std::string out;
    for (size_t at = 0; at < piece.size();) {
        if (piece.substr(at, kSpaceMark.size()) == kSpaceMark) {
            out += ' ';
            at += kSpaceMark.size();
        } else {
            out += piece[at++];
        }
    }
    return out;
}

GgufTokenizer sentencepiece(const GgufFile& f, const std::vector<std::string_view>& tokens) {
    const size_t n = tokens.size();
    Llama2cVocabulary vocab;
    vocab.scores = per_token(f, "tokenizer.ggml.scores", f.floats("tokenizer.ggml.scores"), n);
    for (size_t id = 0; id < n; ++id)
        if (!std::isfinite(vocab.scores[id]))
            f.fail("metadata 'tokenizer.ggml.scores' gives token " + std::to_string(id) + " the score " +
                   std::to_string(vocab.scores[id]) + ", which is not finite");
    vocab.pieces.reserve(n);
    for (std::string_view token : tokens) vocab.pieces.push_back(with_spaces(token));

    SentencePieceOptions options;
    options.add_dummy_prefix = f.boolean("tokenizer.ggml.add_space_prefix").value_or(true);
    const std::vector<int64_t> types = token_types(f, n, kByte);
    for (size_t id = 0; id < n; ++id) {
        if (types[id] == kUserDefined) options.user_defined_ids.push_back(static_cast<int32_t>(id));
        if (types[id] == kControl || types[id] == kUnknown) options.control_ids.push_back(static_cast<int32_t>(id));
    }
    GgufTokenizer out;
    out.n_tokens = static_cast<int>(n);
    out.special = special_tokens(f, n, n > 1 ? 1 : -1, n > 2 ? 2 : -1, true);
    options.add_bos = out.special.add_bos;
    out.tokenizer = std::make_unique<Llama2cTokenizer>(std::move(vocab), out.special.bos, std::move(options),
                                                       "GGUF file '" + f.path() + "'");
    return out;
}

GgufTokenizer byte_level_bpe(const GgufFile& f, const std::vector<std::string_view>& tokens) {
    const size_t n = tokens.size();
    const std::string label(f.string("tokenizer.ggml.pre").value_or(""));
    const PreTokenizerLabel* pre = nullptr;
    for (const PreTokenizerLabel& known : kPreTokenizers)
        if (known.name == label) pre = &known;
    if (!pre) {
        std::string what = "metadata 'tokenizer.ggml.pre' is ";
        what += label.empty() ? std::string("missing") : in_quotes(label);
        f.fail(what + ", a pre-tokenizer kvx does not know (it knows " + gguf_pre_tokenizer_names() + ")");
    }

    BpeTokenizerSpec spec;
    spec.source = "GGUF file '" + f.path() + "'";
    std::unordered_map<std::string_view, size_t> first_id;
    spec.model.vocab.reserve(n);
    for (size_t id = 0; id < n; ++id) {
        auto [it, is_new] = first_id.emplace(tokens[id], id);
        if (!is_new)
            f.fail("metadata " + in_quotes(kTokensKey) + " holds '" + std::string(tokens[id]) + "' twice (tokens " +
                   std::to_string(it->second) + " and " + std::to_string(id) + ")");
        spec.model.vocab.emplace_back(std::string(tokens[id]), static_cast<int32_t>(id));
    }
    if (!f.find("tokenizer.ggml.merges")) f.fail("metadata 'tokenizer.ggml.merges' is missing (the tokenizer needs it)");
    const std::vector<std::string_view> merges = f.strings("tokenizer.ggml.merges");
    spec.model.merges.reserve(merges.size());
    for (std::string_view merge : merges)
        spec.model.merges.push_back(split_merge(merge, spec.model.merges.size(), spec.source + ": tokenizer.ggml.merges"));
    spec.model.ignore_merges = pre->ignore_merges;
    pre->build(spec.pre_tokenizer);

    const std::vector<int64_t> types = token_types(f, n, kUnused);
    for (size_t id = 0; id < n; ++id) {
        const bool special = types[id] == kControl || types[id] == kUnknown;
        if (special || types[id] == kUserDefined)
            spec.added_tokens.push_back({static_cast<int32_t>(id), std::string(tokens[id]), special, false, false, false,
                                         /*normalized=*/false});
    }
    GgufTokenizer out;
    out.n_tokens = static_cast<int>(n);
    out.special = special_tokens(f, n, -1, -1, pre->add_bos);
    if (out.special.add_bos && out.special.bos >= 0) spec.prefix_ids = {out.special.bos};
    out.tokenizer = std::make_unique<BpeTokenizer>(spec);
    return out;
}

}  // namespace

std::vector<int32_t> GgufSpecialTokens::end_ids() const {
    std::vector<int32_t> ids;
    for (int32_t id : {eos, eot, eom})
        if (id >= 0 && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    return ids;
}

const char* gguf_pre_tokenizer_names() {
    static const std::string names = [] {
        std::string joined;
        for (const PreTokenizerLabel& p : kPreTokenizers) (joined += joined.empty() ? "" : ", ") += p.name;
        return joined;
    }();
    return names.c_str();
}

GgufTokenizer load_gguf_tokenizer(const GgufFile& f) {
    const std::string model(f.string("tokenizer.ggml.model").value_or(""));
    if (model.empty()) f.fail("metadata 'tokenizer.ggml.model' is missing: the file has no tokenizer");
    if (model != "llama" && model != "gpt2")
        f.fail("metadata 'tokenizer.ggml.model' is '" + model +
               "', a tokenizer kvx does not read (it reads 'llama', SentencePiece, and 'gpt2', byte-level BPE)");
    if (!f.find(kTokensKey)) f.fail("metadata " + in_quotes(kTokensKey) + " is missing (the tokenizer needs it)");
    const std::vector<std::string_view> tokens = f.strings(kTokensKey);
    if (tokens.empty()) f.fail("metadata " + in_quotes(kTokensKey) + " is empty");
    if (static_cast<int64_t>(tokens.size()) > kMaxTokenizerIds)
        f.fail("metadata " + in_quotes(kTokensKey) + " has " + std::to_string(tokens.size()) + " tokens, more than the " +
               std::to_string(kMaxTokenizerIds) + " kvx allows");
    return model == "llama" ? sentencepiece(f, tokens) : byte_level_bpe(f, tokens);
}

}  // namespace kvx
