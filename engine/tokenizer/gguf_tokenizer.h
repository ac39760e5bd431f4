// The tokenizer a GGUF file describes in its tokenizer.ggml.* metadata, built as one of kvx's own:
//
//   tokenizer.ggml.model "llama"  SentencePiece pieces + scores + token types  -> Llama2cTokenizer
//   tokenizer.ggml.model "gpt2"   byte-level BPE tokens + merges + token types  -> BpeTokenizer, with the
//                                 pre-tokenizer tokenizer.ggml.pre names (the labels below)
//
// Token types (llama.cpp's): 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte. Control and
// unknown tokens are cut out of the text where special tokens are read (encode, not encode_text); user-defined
// ones always. Any other model, a missing or mistyped array, arrays of different lengths, a score that is not
// finite, an id out of range or a pre-tokenizer kvx does not know is a kvx::Error naming the key: a tokenizer
// that splits text differently from llama.cpp's would raise no error anywhere else.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/files/gguf_file.h"
#include "engine/tokenizer/tokenizer.h"

namespace kvx {

// The special tokens of the vocabulary, for the model's config; -1 where the file names none.
struct GgufSpecialTokens {
    int32_t bos = -1;  // tokenizer.ggml.bos_token_id ("llama": 1 when absent, as llama.cpp)
    int32_t eos = -1;  // tokenizer.ggml.eos_token_id ("llama": 2 when absent, as llama.cpp)
    int32_t eot = -1;  // tokenizer.ggml.eot_token_id: end of a turn
    int32_t eom = -1;  // tokenizer.ggml.eom_token_id: end of a message (Llama 3.1's tool calls)
    // tokenizer.ggml.add_bos_token, else llama.cpp's default: true for "llama" and the Llama 3 labels, false
    // for the other "gpt2" ones. The tokenizer's encode(text, true) puts BOS first only when this is true.
    bool add_bos = false;
    std::vector<int32_t> end_ids() const;  // eos, eot, eom: those present, each once, in that order
};

struct GgufTokenizer {
    std::unique_ptr<Tokenizer> tokenizer;
    GgufSpecialTokens special;
    int n_tokens = 0;  // the length of tokenizer.ggml.tokens: every id is below it
};

GgufTokenizer load_gguf_tokenizer(const GgufFile& file);

// The tokenizer.ggml.pre labels kvx reads, comma-separated, for messages.
const char* gguf_pre_tokenizer_names();

}  // namespace kvx
