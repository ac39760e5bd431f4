#include "token_list.h"

#include <climits>
#include <sstream>

#include "kernels/error.h"

namespace kvx::cli {
namespace {

class TokenIdText final : public Tokenizer {
public:
    std::vector<int32_t> encode(std::string_view, bool) const override {
        throw Error("a model without a tokenizer takes token ids (--tokens), not text");
    }
    std::string decode(int32_t prev_token, int32_t token) const override {
        std::string text = prev_token < 0 ? "" : ",";
        text += std::to_string(token);
        return text;
    }
};

}  // namespace

std::vector<int32_t> parse_token_list(const std::string& text) {
    std::vector<int32_t> tokens;
    std::stringstream in(text);
    std::string item;
    while (std::getline(in, item, ',')) {
        size_t used = 0;
        long value = 0;
        try {
            value = std::stol(item, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (used == 0 || used != item.size() || value < 0 || value > INT32_MAX)
            throw Error("--tokens: '" + item + "' is not a token id (expected comma-separated integers)");
        tokens.push_back(static_cast<int32_t>(value));
    }
    return tokens;
}

std::unique_ptr<Tokenizer> token_id_text() { return std::make_unique<TokenIdText>(); }

}  // namespace kvx::cli
