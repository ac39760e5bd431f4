#include "openai_request.h"

#include <cmath>
#include <optional>
#include <random>
#include <string>

#include "engine/model/model_config.h"
#include "api_error.h"
#include "kernels/error.h"

namespace kvx::serve {
namespace {

using nlohmann::json;

constexpr int kMaxLogprobs = 20;
constexpr size_t kMaxStops = 16;

ApiError bad(const std::string& param, const std::string& message) { return ApiError(400, message, param); }

const json* field(const json& body, const char* name) {
    const auto it = body.find(name);
    return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::optional<double> number(const json& body, const char* name, double lo, double hi, bool lo_open = false) {
    const json* v = field(body, name);
    if (!v) return std::nullopt;
    if (!v->is_number()) throw bad(name, std::string("'") + name + "' must be a number");
    const double x = v->get<double>();
    if (!(lo_open ? x > lo : x >= lo) || !(x <= hi))
        throw bad(name, std::string("'") + name + "' must be " + (lo_open ? "above " : "from ") + json(lo).dump() +
                            (lo_open ? " and at most " : " to ") + json(hi).dump() + ", not " + v->dump());
    return x;
}

std::optional<int64_t> integer(const json& body, const char* name, int64_t lo, int64_t hi) {
    const json* v = field(body, name);
    if (!v) return std::nullopt;
    const bool whole = v->is_number_integer() || (v->is_number_float() && std::nearbyint(v->get<double>()) == v->get<double>() &&
                                                  std::abs(v->get<double>()) < 9e15);
    if (!whole || v->is_boolean()) throw bad(name, std::string("'") + name + "' must be an integer");
    const int64_t x = v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                          ? INT64_MAX
                          : v->is_number_float() ? static_cast<int64_t>(v->get<double>()) : v->get<int64_t>();
    if (x < lo || x > hi)
        throw bad(name, std::string("'") + name + "' must be from " + std::to_string(lo) + " to " + std::to_string(hi) +
                            ", not " + v->dump());
    return x;
}

std::optional<bool> boolean(const json& body, const char* name) {
    const json* v = field(body, name);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) throw bad(name, std::string("'") + name + "' must be true or false");
    return v->get<bool>();
}

std::string text_of(const json& v, const std::string& param) {
    if (!v.is_string()) throw bad(param, "'" + param + "' must be a string");
    return v.get<std::string>();
}

std::vector<int32_t> token_ids(const json& ids, const ServedModel& model) {
    std::vector<int32_t> tokens;
    for (const json& id : ids) {
        if (!id.is_number_integer()) throw bad("prompt", "'prompt' must be a string or a list of token ids");
        const int64_t t = id.get<int64_t>();
        if (t < 0 || t >= model.config->vocab_size)
            throw bad("prompt", "token id " + std::to_string(t) + " is outside the vocabulary of " +
                                    std::to_string(model.config->vocab_size));
        tokens.push_back(static_cast<int32_t>(t));
    }
    return tokens;
}

// A text prompt as kvx generate encodes it: BOS first where the model has one.
std::vector<int32_t> encode_prompt(const std::string& text, const ServedModel& model) {
    try {
        return model.tokenizer->encode(text, /*add_bos=*/true);
    } catch (const Error& e) {
        throw bad("prompt", std::string("the prompt cannot be encoded: ") + e.what());
    }
}

std::vector<int32_t> completion_prompt(const json& body, const ServedModel& model) {
    const json* p = field(body, "prompt");
    if (!p) throw bad("prompt", "'prompt' is required");
    if (p->is_string()) return encode_prompt(p->get<std::string>(), model);
    if (!p->is_array()) throw bad("prompt", "'prompt' must be a string or a list of token ids");
    if (p->empty()) throw bad("prompt", "'prompt' is an empty list");
    if ((*p)[0].is_number()) return token_ids(*p, model);
    if (p->size() > 1) throw bad("prompt", "kvx serve answers one prompt per request; send the others separately");
    const json& only = (*p)[0];
    if (only.is_string()) return encode_prompt(only.get<std::string>(), model);
    if (only.is_array()) return token_ids(only, model);
    throw bad("prompt", "'prompt' must be a string or a list of token ids");
}

std::string message_content(const json& m, size_t i) {
    const std::string param = "messages[" + std::to_string(i) + "].content";
    const auto it = m.find("content");
    if (it == m.end() || it->is_null()) throw bad(param, "message " + std::to_string(i) + " has no content");
    if (it->is_string()) return it->get<std::string>();
    if (!it->is_array()) throw bad(param, "'" + param + "' must be a string or a list of text parts");
    std::string text;
    for (const json& part : *it) {
        // json::value("type", "") throws nlohmann's type_error when "type" is there but not a string (found by
        // fuzz_replay_openai_request: {"type": 5}), so each field's type is checked first.
        const auto is_text = [&](const char* key) { return part.contains(key) && part[key].is_string(); };
        if (!part.is_object() || !is_text("type") || part["type"] != "text" || !is_text("text"))
            throw bad(param, "kvx serve reads text parts only ({\"type\": \"text\", \"text\": ...})");
        text += part["text"].get<std::string>();
    }
    return text;
}

std::vector<int32_t> chat_prompt(const json& body, const ServedModel& model) {
    if (!model.chat) throw bad("messages", "the model cannot chat: " + model.no_chat_reason);
    const json* ms = field(body, "messages");
    if (!ms) throw bad("messages", "'messages' is required");
    if (!ms->is_array() || ms->empty()) throw bad("messages", "'messages' must be a non-empty list of messages");
    std::vector<ChatMessage> messages;
    for (size_t i = 0; i < ms->size(); ++i) {
        const json& m = (*ms)[i];
        if (!m.is_object()) throw bad("messages", "message " + std::to_string(i) + " is not an object");
        const auto role = m.find("role");
        if (role == m.end() || !role->is_string())
            throw bad("messages[" + std::to_string(i) + "].role", "message " + std::to_string(i) + " has no role");
        messages.push_back({role->get<std::string>(), message_content(m, i)});
    }
    try {
        return model.chat->conversation_tokens(messages);
    } catch (const Error& e) {
        throw bad("messages", e.what());
    }
}

std::vector<std::string> stop_strings(const json& body) {
    const json* s = field(body, "stop");
    if (!s) return {};
    if (s->is_string()) return {s->get<std::string>()};
    if (!s->is_array()) throw bad("stop", "'stop' must be a string or a list of strings");
    if (s->size() > kMaxStops) throw bad("stop", "'stop' holds at most " + std::to_string(kMaxStops) + " strings");
    std::vector<std::string> stops;
    for (const json& one : *s) stops.push_back(text_of(one, "stop"));
    return stops;
}

}  // namespace

ApiRequest parse_api_request(Endpoint endpoint, const json& body, const ServedModel& model) {
    if (!body.is_object()) throw bad("", "the request body must be a JSON object");
    if (const json* m = field(body, "model"); m && (!m->is_string() || m->get<std::string>() != model.id))
        throw ApiError(404, "the model '" + (m->is_string() ? m->get<std::string>() : m->dump()) +
                                "' does not exist; this server serves '" + model.id + "'",
                       "model", "model_not_found");
    ApiRequest out;
    out.endpoint = endpoint;
    ServeRequest& r = out.serve;
    const bool chat = endpoint == Endpoint::chat;
    r.prompt = chat ? chat_prompt(body, model) : completion_prompt(body, model);
    // A tokenizer that puts nothing before a text gives an empty prompt no tokens: start from BOS as generate does.
    if (r.prompt.empty() && model.config->bos_token_id >= 0) r.prompt.push_back(model.config->bos_token_id);
    if (r.prompt.empty()) throw bad("prompt", "the prompt is empty and the model has no BOS token to start from");
    const auto prompt_len = static_cast<int64_t>(r.prompt.size());
    if (prompt_len >= model.context)
        throw ApiError(400, "the prompt is " + std::to_string(prompt_len) + " tokens; this server's context is " +
                                std::to_string(model.context) + " tokens, prompt and answer together",
                       chat ? "messages" : "prompt", "context_length_exceeded");

    std::optional<int64_t> max_tokens = integer(body, "max_tokens", 0, INT32_MAX);
    if (chat && !max_tokens) max_tokens = integer(body, "max_completion_tokens", 0, INT32_MAX);
    if (max_tokens && prompt_len + *max_tokens > model.context)
        throw ApiError(400, "the prompt (" + std::to_string(prompt_len) + " tokens) and max_tokens " +
                                std::to_string(*max_tokens) + " exceed this server's context of " +
                                std::to_string(model.context) + " tokens",
                       "max_tokens", "context_length_exceeded");
    r.max_tokens = static_cast<int32_t>(max_tokens.value_or(chat ? model.context - prompt_len : 16));

    r.sampling.temperature = static_cast<float>(number(body, "temperature", 0, 2).value_or(1.0));
    r.sampling.top_p = static_cast<float>(number(body, "top_p", 0, 1, /*lo_open=*/true).value_or(1.0));
    const int64_t top_k = integer(body, "top_k", -1, INT32_MAX).value_or(0);
    r.sampling.top_k = top_k < 0 ? 0 : static_cast<int>(top_k);
    if (const auto seed = integer(body, "seed", INT64_MIN, INT64_MAX))
        r.sampling.seed = static_cast<uint64_t>(*seed);
    else
        r.sampling.seed = std::random_device{}();
    r.n = static_cast<int32_t>(integer(body, "n", 1, model.max_seqs).value_or(1));
    r.stop = stop_strings(body);
    if (!boolean(body, "ignore_eos").value_or(false)) {  // vLLM's and llama.cpp's field, for fixed-length runs
        r.stop_token_ids = model.config->eos_token_ids;
        if (chat) r.stop_token_ids.push_back(model.chat->end_of_turn_token());
    }

    if (chat) {
        out.logprobs = boolean(body, "logprobs").value_or(false);
        const auto top = integer(body, "top_logprobs", 0, kMaxLogprobs);
        if (top && !out.logprobs) throw bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
        if (out.logprobs) r.top_logprobs = static_cast<int32_t>(top.value_or(0));
    } else if (const auto top = integer(body, "logprobs", 0, kMaxLogprobs)) {
        out.logprobs = true;
        r.top_logprobs = static_cast<int32_t>(*top);
    }
    out.stream = boolean(body, "stream").value_or(false);
    if (const json* so = field(body, "stream_options"); so && !so->is_object())
        throw bad("stream_options", "'stream_options' must be an object");
    return out;
}

}  // namespace kvx::serve
