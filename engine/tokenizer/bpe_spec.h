// Everything a byte-level BPE tokenizer is made of, as read from its files (tokenizer.json, or GPT-2's
// encoder.json + vocab.bpe) and before any table is built: the readers check the files, BpeTokenizer builds.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/tokenizer/bpe_added_tokens.h"
#include "engine/tokenizer/bpe_model.h"
#include "engine/tokenizer/bpe_pretokenizer.h"

namespace kvx {

struct BpeTokenizerSpec {
    std::string source;  // "tokenizer 'PATH'", the start of every message about it
    BpeModelSpec model;
    std::vector<AddedToken> added_tokens;
    std::vector<PreTokenizerStep> pre_tokenizer;
    std::vector<int32_t> prefix_ids;  // what the post-processor puts in front of the text (encode's add_bos)
};

// The largest tokenizer file read (Gemma 3's tokenizer.json is about 33 MB).
inline constexpr size_t kMaxTokenizerFileBytes = size_t{256} << 20;
// The ids a tokenizer read without a model may use: as many as a model's vocabulary may hold
// (ConfigLimits::vocab_size; engine/generation/load_tokenizer.cpp, which sees both, holds them equal).
inline constexpr int64_t kMaxTokenizerIds = int64_t{1} << 22;

// HF tokenizer.json: a BPE model over the byte-level alphabet with the components BpeTokenizer implements;
// anything else is a kvx::Error naming the component. Every token id must be below id_limit (the model's
// vocabulary size where there is a model): BpeTokenizer's tables are as long as the largest id, so an id is
// checked before anything is sized by it.
BpeTokenizerSpec read_hf_tokenizer_json(const std::string& path, int64_t id_limit = kMaxTokenizerIds);

// GPT-2's own files: encoder.json (token -> id) and vocab.bpe (a "#version" line, then one merge "a b" per
// line in rank order), with GPT-2's pre-tokenizer and <|endoftext|> as its special token.
BpeTokenizerSpec read_gpt2_tokenizer(const std::string& encoder_path, const std::string& merges_path,
                                     int64_t id_limit = kMaxTokenizerIds);

// Shared by both readers.
std::vector<std::pair<std::string, int32_t>> read_vocab(const nlohmann::json& vocab, const std::string& source,
                                                        int64_t id_limit);
// "a b" -> {a, b}; a line that is not two parts around one space is an error naming its rank.
std::pair<std::string, std::string> split_merge(std::string_view line, size_t rank, const std::string& source);
// ByteLevel's steps: PrefixSpace when add_prefix_space, then GPT-2's pattern, Isolated, when use_regex.
void append_byte_level_steps(std::vector<PreTokenizerStep>& steps, bool add_prefix_space, bool use_regex);
// Digits: each numeric character (Unicode N) a piece of its own, or each run of them.
void append_digits_step(std::vector<PreTokenizerStep>& steps, bool individual_digits);

}  // namespace kvx
