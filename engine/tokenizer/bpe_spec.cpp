#include "engine/tokenizer/bpe_spec.h"

#include <memory>

#include "engine/files/json_file.h"
#include "kernels/error.h"

namespace kvx {

using nlohmann::json;

std::vector<std::pair<std::string, int32_t>> read_vocab(const json& vocab, const std::string& source,
                                                        int64_t id_limit) {
    if (!vocab.is_object() || vocab.empty()) throw Error(source + ": the vocabulary is missing or empty");
    std::vector<std::pair<std::string, int32_t>> out;
    out.reserve(vocab.size());
    for (const auto& [token, id] : vocab.items())
        out.emplace_back(token, static_cast<int32_t>(json_integer(id, 0, id_limit - 1,
                                                                  source + ": the id of vocabulary entry '" + token + "'")));
    return out;
}

std::pair<std::string, std::string> split_merge(std::string_view line, size_t rank, const std::string& source) {
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos)
        throw Error(source + ": merge " + std::to_string(rank) + " '" + std::string(line) +
                    "' is not two tokens separated by one space");
    return {std::string(line.substr(0, space)), std::string(line.substr(space + 1))};
}

void append_byte_level_steps(std::vector<PreTokenizerStep>& steps, bool add_prefix_space, bool use_regex) {
    if (add_prefix_space) steps.push_back({PreTokenizerStep::Kind::PrefixSpace, nullptr, SplitBehavior::Isolated, false});
    if (use_regex)
        steps.push_back({PreTokenizerStep::Kind::Split, std::make_shared<Regex>(kGpt2Pattern, Regex::Syntax::Oniguruma),
                         SplitBehavior::Isolated, false});
}

void append_digits_step(std::vector<PreTokenizerStep>& steps, bool individual_digits) {
    steps.push_back({PreTokenizerStep::Kind::Split,
                     std::make_shared<Regex>(individual_digits ? R"(\p{N})" : R"(\p{N}+)", Regex::Syntax::Pcre2),
                     SplitBehavior::Isolated, false});
}

}  // namespace kvx
