// The OpenAI API's answers: a whole completion or chat completion, or, with stream: true, one server-sent
// event per delta ("data: {chunk}\n\n"), a last one with the usage, and "data: [DONE]".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/serving/serve_request.h"
#include "openai_request.h"

namespace kvx::serve {

class ApiAnswer {
public:
    ApiAnswer(const ApiRequest& request, const std::string& model_id);

    // Streaming: the event for one delta, and the closing events.
    std::string event(const ChoiceDelta& delta);
    std::string closing_events(const ServeUsage& usage) const;

    // Whole: gathers every delta, then the answer.
    void add(const ChoiceDelta& delta);
    std::string whole(const ServeUsage& usage) const;

private:
    struct Choice {
        std::string text;
        std::vector<SampledToken> tokens;
        size_t offset = 0;  // text_offset of the next token (completions' logprobs)
        FinishReason finish = FinishReason::none;
        bool role_sent = false;
    };
    nlohmann::json logprobs_json(Choice& choice, const std::vector<SampledToken>& tokens) const;
    nlohmann::json head() const;
    static nlohmann::json usage_json(const ServeUsage& usage);

    Endpoint endpoint_;
    bool logprobs_;
    std::string id_;
    int64_t created_;
    std::string model_;
    std::vector<Choice> choices_;  // [n]
};

// JSON text with invalid UTF-8 replaced (a token's piece may hold part of a character).
std::string dump_json(const nlohmann::json& value);

}  // namespace kvx::serve
