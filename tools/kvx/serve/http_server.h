// The OpenAI-compatible HTTP front of a Scheduler (cpp-httplib, the library llama.cpp's server uses; JSON by
// nlohmann-json):
//   POST /v1/completions, POST /v1/chat/completions   (stream: true as server-sent events)
//   GET  /v1/models, GET /health, GET /metrics         (Prometheus text)
// Each connection has a thread of the pool that waits on its request's stream; the engine runs on the
// scheduler's thread alone. With an API key, every path but /health wants "Authorization: Bearer KEY".
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "engine/serving/scheduler.h"
#include "served_model.h"

namespace httplib {
class Server;
}

namespace kvx::serve {

struct HttpOptions {
    std::string host = "127.0.0.1";
    int port = 8080;        // 0: any free port (bind() says which)
    std::string api_key;    // empty: no authentication
    int threads = 0;        // connections served at once (a streaming request holds one); kvx serve sets it
    size_t max_body = 8u << 20;
};

class ApiServer {
public:
    ApiServer(const ServedModel& model, Scheduler& scheduler, HttpOptions options);
    ~ApiServer();
    ApiServer(const ApiServer&) = delete;
    ApiServer& operator=(const ApiServer&) = delete;

    // Binds the listening socket and returns its port; throws kvx::Error when it cannot.
    int bind();
    // Serves until stop(), from any thread.
    void listen();
    // Waits (up to `drain`) for the answers being written to end, then closes every connection. After
    // Scheduler::shutdown and its run() returned, every answer has its last event and only writing is left.
    void stop(std::chrono::milliseconds drain);

private:
    void add_routes();

    const ServedModel& model_;
    Scheduler& scheduler_;
    HttpOptions options_;
    std::unique_ptr<httplib::Server> server_;
    std::shared_ptr<std::atomic<int>> open_answers_ = std::make_shared<std::atomic<int>>(0);
};

}  // namespace kvx::serve
