#include "engine/generation/load_tokenizer.h"

#include "engine/files/gguf_file.h"
#include "engine/files/regular_file.h"
#include "engine/tokenizer/bpe_spec.h"
#include "engine/tokenizer/gguf_tokenizer.h"
#include "engine/tokenizer/tokenizer_bpe.h"
#include "engine/tokenizer/tokenizer_llama2c.h"
#include "kernels/error.h"

namespace kvx {
namespace {

// A tokenizer read without a model (kvx tokenize on a bare tokenizer.json) takes ids up to the largest
// vocabulary a model may declare, no fewer and no more.
static_assert(kMaxTokenizerIds == ConfigLimits::vocab_size);

// Every id the tokenizer can produce must have a row in the model's embedding; a model may have more rows
// than the tokenizer has tokens (padding), never fewer.
void check_fits(const BpeTokenizer& t, int vocab_size) {
    if (t.max_id() >= vocab_size)
        throw Error(t.source() + " has " + std::to_string(t.n_tokens()) + " tokens (ids up to " +
                    std::to_string(t.max_id()) + ") but the model's vocabulary has " + std::to_string(vocab_size));
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& model_dir, const ModelConfig& config) {
    if (config.tokenizer_type.empty())
        throw Error("the model in '" + model_dir + "' has no tokenizer: pass token ids instead of text");
    if (config.tokenizer_type == "gguf") {  // model_dir is the GGUF file itself
        GgufTokenizer gguf = load_gguf_tokenizer(GgufFile(model_dir));
        if (gguf.n_tokens > config.vocab_size)
            throw Error("GGUF file '" + model_dir + "' has " + std::to_string(gguf.n_tokens) +
                        " tokens but the model's vocabulary has " + std::to_string(config.vocab_size));
        return std::move(gguf.tokenizer);
    }
    const std::string path = file_inside(model_dir, config.tokenizer_file, "tokenizer.file");
    if (config.tokenizer_type == "llama2c")
        return std::make_unique<Llama2cTokenizer>(
            path, config.vocab_size, config.bos_token_id,
            SentencePieceOptions{config.tokenizer_add_dummy_prefix, config.tokenizer_user_defined_ids,
                                 config.tokenizer_control_ids});
    std::unique_ptr<BpeTokenizer> bpe;
    if (config.tokenizer_type == "bpe")
        bpe = std::make_unique<BpeTokenizer>(read_hf_tokenizer_json(path));
    else if (config.tokenizer_type == "gpt2")
        bpe = std::make_unique<BpeTokenizer>(
            read_gpt2_tokenizer(path, file_inside(model_dir, config.tokenizer_merges_file, "tokenizer.merges_file")));
    else
        throw Error("unsupported tokenizer type '" + config.tokenizer_type + "'");
    check_fits(*bpe, config.vocab_size);
    return bpe;
}

}  // namespace kvx
