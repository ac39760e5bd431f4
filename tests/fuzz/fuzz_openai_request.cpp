// Any bytes as the body of POST /v1/completions and /v1/chat/completions (tools/kvx/serve/openai_request.cpp),
// and what a request that parses does: through the scheduler over an engine that computes nothing, then into
// the answer's JSON, whole and streamed. A body is refused with an ApiError (the server's 4xx) or answered;
// a parsed request is within the server's limits, and its answer is JSON that parses back.
#include <cstdlib>
#include <memory>

#include <nlohmann/json.hpp>

#include "engine/serving/scheduler.h"
#include "fuzz_support.h"
#include "tools/kvx/serve/api_error.h"
#include "tools/kvx/serve/openai_request.h"
#include "tools/kvx/serve/openai_response.h"

namespace {

using namespace kvx;

constexpr int32_t kMaxSeqs = 4;

void check(bool ok) {
    if (!ok) std::abort();
}

void answer(const serve::ApiRequest& request, const ModelConfig& config) {
    EngineOptions options;
    options.block_size = 16;
    options.num_blocks = 64;
    Engine engine(config, std::make_unique<fuzz::CommaBackend>(), options);
    Scheduler scheduler(engine, fuzz::chatml_gpt2(), SchedulerOptions{.max_seqs = kMaxSeqs, .max_waiting = 4});
    const std::shared_ptr<RequestStream> stream = scheduler.submit(request.serve);
    check(stream != nullptr);
    scheduler.shutdown(std::chrono::hours(1));  // run() answers the request, then returns
    scheduler.run();
    serve::ApiAnswer whole(request, "m"), streamed(request, "m");
    StreamEvent e;
    while (stream->next(e, std::chrono::milliseconds(0))) {
        check(e.kind != StreamEvent::Kind::error);
        if (e.kind == StreamEvent::Kind::done) {
            check(!nlohmann::json::parse(whole.whole(e.usage)).is_discarded());
            check(streamed.closing_events(e.usage).rfind("data: ", 0) == 0);
            return;
        }
        whole.add(e.delta);
        const std::string event = streamed.event(e.delta);
        check(!nlohmann::json::parse(event.substr(6)).is_discarded());
    }
    std::abort();  // no end
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const ModelConfig config = [] {
        ModelConfig c = fuzz::chatml_config();
        c.eos_token_ids = {fuzz::kImEnd};
        return c;
    }();
    static const ChatTemplate chat(config, fuzz::chatml_gpt2());
    serve::ServedModel model;
    model.id = "m";
    model.config = &config;
    model.tokenizer = &fuzz::chatml_gpt2();
    model.chat.emplace(chat);
    model.context = config.max_seq_len;
    model.max_seqs = kMaxSeqs;

    const nlohmann::json body = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded()) return 0;  // the server answers 400 before parsing fields
    for (const serve::Endpoint endpoint : {serve::Endpoint::completions, serve::Endpoint::chat}) {
        try {
            serve::ApiRequest request = serve::parse_api_request(endpoint, body, model);
            const ServeRequest& r = request.serve;
            check(!r.prompt.empty() && r.max_tokens >= 0 && r.n >= 1 && r.n <= kMaxSeqs && r.top_logprobs <= 20);
            check(static_cast<int64_t>(r.prompt.size()) + r.max_tokens <= model.context);
            fuzz::accepted_or_refused([&] { answer(request, config); });  // refused: more blocks than the pool
        } catch (const serve::ApiError& e) {
            check(e.status() == 400 || e.status() == 404);
        }
    }
    return 0;
}
