// GPT-2's tokenizer as OpenAI published it: encoder.json and vocab.bpe (read_gpt2_tokenizer in bpe_spec.h).
#include <fstream>

#include "engine/tokenizer/bpe_spec.h"
#include "kernels/error.h"

namespace kvx {

BpeTokenizerSpec read_gpt2_tokenizer(const std::string& encoder_path, const std::string& merges_path) {
    BpeTokenizerSpec spec;
    spec.source = "tokenizer '" + encoder_path + "'";
    spec.model.vocab = read_vocab(read_json_file(encoder_path, spec.source), spec.source);

    const std::string merges_source = "merges '" + merges_path + "'";
    std::ifstream in(merges_path, std::ios::binary);
    if (!in) throw Error("cannot read " + merges_source);
    std::string line;
    while (std::getline(in, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.empty() || line.starts_with("#version")) continue;
        spec.model.merges.push_back(split_merge(line, spec.model.merges.size(), merges_source));
    }
    if (spec.model.merges.empty()) throw Error(merges_source + " holds no merges");

    for (const auto& [token, id] : spec.model.vocab)
        if (token == "<|endoftext|>") spec.added_tokens.push_back({id, token, true, false, false, false, false});
    append_byte_level_steps(spec.pre_tokenizer, /*add_prefix_space=*/false, /*use_regex=*/true);
    return spec;
}

}  // namespace kvx
