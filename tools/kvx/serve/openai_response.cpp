#include "openai_response.h"

#include <atomic>
#include <chrono>
#include <cstdio>

namespace kvx::serve {
namespace {

using nlohmann::json;

std::string next_id(Endpoint endpoint) {
    static std::atomic<uint64_t> counter{0};
    char id[48];
    std::snprintf(id, sizeof id, "%s-%016llx", endpoint == Endpoint::chat ? "chatcmpl" : "cmpl",
                  static_cast<unsigned long long>(counter.fetch_add(1) + 1));
    return id;
}

json finish_json(FinishReason reason) {
    const char* name = finish_reason_name(reason);
    return name ? json(name) : json(nullptr);
}

json bytes_of(const std::string& piece) {
    json bytes = json::array();
    for (unsigned char c : piece) bytes.push_back(c);
    return bytes;
}

}  // namespace

std::string dump_json(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

ApiAnswer::ApiAnswer(const ApiRequest& request, const std::string& model_id)
    : endpoint_(request.endpoint),
      logprobs_(request.logprobs),
      id_(next_id(request.endpoint)),
      created_(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count()),
      model_(model_id),
      choices_(static_cast<size_t>(request.serve.n)) {}

json ApiAnswer::head() const {
    const bool chat = endpoint_ == Endpoint::chat;
    return {{"id", id_}, {"object", chat ? "chat.completion" : "text_completion"}, {"created", created_}, {"model", model_}};
}

json ApiAnswer::usage_json(const ServeUsage& u) {
    return {{"prompt_tokens", u.prompt_tokens},
            {"completion_tokens", u.completion_tokens},
            {"total_tokens", u.prompt_tokens + u.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

json ApiAnswer::logprobs_json(Choice& choice, const std::vector<SampledToken>& tokens) const {
    if (endpoint_ == Endpoint::chat) {
        json content = json::array();
        for (const SampledToken& t : tokens) {
            json top = json::array();
            for (const TokenLogprob& alt : t.top)
                top.push_back({{"token", alt.piece}, {"logprob", alt.logprob}, {"bytes", bytes_of(alt.piece)}});
            content.push_back({{"token", t.piece}, {"logprob", t.logprob}, {"bytes", bytes_of(t.piece)}, {"top_logprobs", top}});
        }
        return {{"content", content}};
    }
    json pieces = json::array(), logprobs = json::array(), tops = json::array(), offsets = json::array();
    for (const SampledToken& t : tokens) {
        pieces.push_back(t.piece);
        logprobs.push_back(t.logprob);
        json top = json::object();
        for (const TokenLogprob& alt : t.top) top[alt.piece] = alt.logprob;
        tops.push_back(top);
        offsets.push_back(choice.offset);
        choice.offset += t.piece.size();
    }
    return {{"tokens", pieces}, {"token_logprobs", logprobs}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

std::string ApiAnswer::event(const ChoiceDelta& delta) {
    Choice& choice = choices_.at(static_cast<size_t>(delta.choice));
    json c = {{"index", delta.choice}, {"logprobs", nullptr}, {"finish_reason", finish_json(delta.finish)}};
    if (logprobs_ && !delta.tokens.empty()) c["logprobs"] = logprobs_json(choice, delta.tokens);
    json chunk = head();
    if (endpoint_ == Endpoint::chat) {
        chunk["object"] = "chat.completion.chunk";
        json d = json::object();
        if (!choice.role_sent) d["role"] = "assistant";
        if (!delta.text.empty() || !choice.role_sent) d["content"] = delta.text;
        choice.role_sent = true;
        c["delta"] = d;
    } else {
        c["text"] = delta.text;
    }
    chunk["choices"] = json::array({c});
    return "data: " + dump_json(chunk) + "\n\n";
}

std::string ApiAnswer::closing_events(const ServeUsage& usage) const {
    json chunk = head();
    if (endpoint_ == Endpoint::chat) chunk["object"] = "chat.completion.chunk";
    chunk["choices"] = json::array();
    chunk["usage"] = usage_json(usage);
    return "data: " + dump_json(chunk) + "\n\ndata: [DONE]\n\n";
}

void ApiAnswer::add(const ChoiceDelta& delta) {
    Choice& choice = choices_.at(static_cast<size_t>(delta.choice));
    choice.text += delta.text;
    choice.tokens.insert(choice.tokens.end(), delta.tokens.begin(), delta.tokens.end());
    if (delta.finish != FinishReason::none) choice.finish = delta.finish;
}

std::string ApiAnswer::whole(const ServeUsage& usage) const {
    json answer = head();
    json list = json::array();
    for (size_t i = 0; i < choices_.size(); ++i) {
        Choice choice = choices_[i];  // logprobs_json advances the copy's offsets
        json c = {{"index", i}, {"logprobs", nullptr}, {"finish_reason", finish_json(choice.finish)}};
        if (logprobs_) c["logprobs"] = logprobs_json(choice, choices_[i].tokens);
        if (endpoint_ == Endpoint::chat)
            c["message"] = {{"role", "assistant"}, {"content", choice.text}};
        else
            c["text"] = choice.text;
        list.push_back(c);
    }
    answer["choices"] = list;
    answer["usage"] = usage_json(usage);
    return dump_json(answer);
}

}  // namespace kvx::serve
