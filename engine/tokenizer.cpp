#include "engine/tokenizer.h"

#include "engine/error.h"
#include "engine/tokenizer_llama2c.h"

namespace kvx {
namespace {

class Llama2cAdapter final : public Tokenizer {
public:
    Llama2cAdapter(const std::string& path, const ModelConfig& c) : impl_(path, c.vocab_size, c.bos_token_id) {}
    std::vector<int32_t> encode(std::string_view text, bool add_bos) const override { return impl_.encode(text, add_bos); }
    std::string decode(int32_t prev, int32_t token) const override { return impl_.decode(prev, token); }

private:
    Llama2cTokenizer impl_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& model_dir, const ModelConfig& config) {
    if (config.tokenizer_type.empty())
        throw Error("the model in '" + model_dir + "' has no tokenizer: pass token ids instead of text");
    const std::string path = model_dir + "/" + config.tokenizer_file;
    if (config.tokenizer_type == "llama2c") return std::make_unique<Llama2cAdapter>(path, config);
    throw Error("unsupported tokenizer type '" + config.tokenizer_type + "'");
}

}  // namespace kvx
