#include "engine/tokenizer/bpe_spec.h"

#include <fstream>
#include <memory>

#include "kernels/error.h"

namespace kvx {

using nlohmann::json;

json read_json_file(const std::string& path, const std::string& source) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error("cannot read " + source);
    json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) throw Error(source + " is not a JSON object (truncated or not UTF-8?)");
    return j;
}

std::vector<std::pair<std::string, int32_t>> read_vocab(const json& vocab, const std::string& source) {
    if (!vocab.is_object() || vocab.empty()) throw Error(source + ": the vocabulary is missing or empty");
    std::vector<std::pair<std::string, int32_t>> out;
    out.reserve(vocab.size());
    for (const auto& [token, id] : vocab.items()) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > (int64_t{1} << 30))
            throw Error(source + ": vocabulary entry '" + token + "' has no valid id");
        out.emplace_back(token, id.get<int32_t>());
    }
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

}  // namespace kvx
