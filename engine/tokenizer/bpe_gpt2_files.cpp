// GPT-2's tokenizer as OpenAI published it: encoder.json and vocab.bpe (read_gpt2_tokenizer in bpe_spec.h).
#include <algorithm>
#include <string_view>

#include "engine/files/json_file.h"
#include "engine/files/regular_file.h"
#include "engine/tokenizer/bpe_spec.h"
#include "kernels/error.h"

namespace kvx {

BpeTokenizerSpec read_gpt2_tokenizer(const std::string& encoder_path, const std::string& merges_path,
                                     int64_t id_limit) {
    BpeTokenizerSpec spec;
    spec.source = "tokenizer '" + encoder_path + "'";
    spec.model.vocab =
        read_vocab(read_json_object(encoder_path, "tokenizer", kMaxTokenizerFileBytes), spec.source, id_limit);

    const std::string merges_source = "merges '" + merges_path + "'";
    const std::string merges = RegularFile(merges_path, "merges").read_all(kMaxTokenizerFileBytes);
    for (size_t at = 0; at < merges.size();) {
        const size_t end = std::min(merges.find('\n', at), merges.size());
        std::string_view line(merges.data() + at, end - at);
        at = end + 1;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
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
