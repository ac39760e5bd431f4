#include "http_server.h"

#include <chrono>
#include <thread>
#include <utility>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "api_error.h"
#include "kernels/error.h"
#include "openai_response.h"
#include "prometheus.h"

namespace kvx::serve {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

void answer_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status();
    if (e.status() == 503) res.set_header("Retry-After", "1");
    res.set_content(e.json(), "application/json");
}

// The request's stream, or an ApiError: 400 for a request that can never run, 503 when the queue is full.
std::shared_ptr<RequestStream> submit(Scheduler& scheduler, ServeRequest request) {
    std::shared_ptr<RequestStream> stream;
    try {
        stream = scheduler.submit(std::move(request));
    } catch (const Error& e) {
        throw ApiError(400, e.what());
    }
    if (!stream)
        throw ApiError(503, scheduler.accepting() ? "the server's queue is full; retry later" : "the server is shutting down");
    return stream;
}

// Waits for the whole answer. A client that leaves is noticed only by a streaming request's next write.
void answer_whole(httplib::Response& res, RequestStream& stream, ApiAnswer& answer) {
    StreamEvent e;
    for (;;) {
        if (!stream.next(e, 1s)) continue;
        if (e.kind == StreamEvent::Kind::delta) {
            answer.add(e.delta);
        } else if (e.kind == StreamEvent::Kind::done) {
            res.set_content(answer.whole(e.usage), "application/json");
            return;
        } else {
            throw ApiError(500, e.error);
        }
    }
}

// Counts an answer being written from construction until destruction (of the last copy).
class OpenAnswer {
public:
    explicit OpenAnswer(std::shared_ptr<std::atomic<int>> count) : count_(std::move(count)) { ++*count_; }
    ~OpenAnswer() { --*count_; }
    OpenAnswer(const OpenAnswer&) = delete;
    OpenAnswer& operator=(const OpenAnswer&) = delete;

private:
    std::shared_ptr<std::atomic<int>> count_;
};

void answer_stream(httplib::Response& res, std::shared_ptr<RequestStream> stream, std::shared_ptr<ApiAnswer> answer,
                   std::shared_ptr<OpenAnswer> open) {
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [stream, answer](size_t, httplib::DataSink& sink) {
            StreamEvent e;
            // A comment line every second while nothing comes: a client that left makes the write fail.
            if (!stream->next(e, 1s)) {
                static constexpr char keep_alive[] = ": waiting\n\n";
                if (!sink.write(keep_alive, sizeof keep_alive - 1)) stream->cancel();
                return !stream->cancelled();
            }
            std::string out;
            bool last = false;
            if (e.kind == StreamEvent::Kind::delta) {
                out = answer->event(e.delta);
            } else if (e.kind == StreamEvent::Kind::done) {
                out = answer->closing_events(e.usage);
                last = true;
            } else {
                out = "data: " + ApiError(500, e.error).json() + "\n\ndata: [DONE]\n\n";
                last = true;
            }
            if (!sink.write(out.data(), out.size())) {
                stream->cancel();
                return false;
            }
            if (last) sink.done();
            return true;
        },
        [stream, open](bool success) {
            if (!success) stream->cancel();  // the connection broke: the scheduler frees the sequences
        });
}

}  // namespace

ApiServer::ApiServer(const ServedModel& model, Scheduler& scheduler, HttpOptions options)
    : model_(model), scheduler_(scheduler), options_(std::move(options)), server_(std::make_unique<httplib::Server>()) {
    const int threads = options_.threads;
    server_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    server_->set_payload_max_length(options_.max_body);
    server_->set_read_timeout(30, 0);
    server_->set_write_timeout(30, 0);
    add_routes();
}

ApiServer::~ApiServer() = default;

int ApiServer::bind() {
    const int port = options_.port == 0 ? server_->bind_to_any_port(options_.host)
                                        : (server_->bind_to_port(options_.host, options_.port) ? options_.port : -1);
    if (port <= 0)
        throw Error("cannot listen on " + options_.host + ":" + std::to_string(options_.port) +
                    " (in use, or not an address of this machine)");
    return port;
}

void ApiServer::listen() { server_->listen_after_bind(); }

void ApiServer::stop(std::chrono::milliseconds drain) {
    const auto deadline = std::chrono::steady_clock::now() + drain;
    while (open_answers_->load() > 0 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(10ms);
    server_->stop();
}

void ApiServer::add_routes() {
    httplib::Server& s = *server_;
    s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
        if (options_.api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
        if (req.get_header_value("Authorization") == "Bearer " + options_.api_key)
            return httplib::Server::HandlerResponse::Unhandled;
        answer_error(res, ApiError(401, "a valid API key is required: send 'Authorization: Bearer KEY'", "",
                                   "invalid_api_key"));
        return httplib::Server::HandlerResponse::Handled;
    });
    s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        try {
            std::rethrow_exception(ep);
        } catch (const ApiError& e) {
            answer_error(res, e);
        } catch (const std::exception& e) {
            answer_error(res, ApiError(500, e.what()));
        }
    });
    s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return;  // an answer of ours
        if (res.status == 404)
            answer_error(res, ApiError(404, "no such endpoint: " + req.method + " " + req.path));
        else if (res.status == 413)
            answer_error(res, ApiError(413, "the request body is too large"));
        else if (res.status == 400)
            answer_error(res, ApiError(400, "the request is not valid HTTP"));
    });

    s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
        if (!scheduler_.accepting()) return answer_error(res, ApiError(503, "the server is shutting down"));
        res.set_content(R"({"status":"ok"})", "application/json");
    });
    s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
        const json model = {{"id", model_.id}, {"object", "model"}, {"created", 0}, {"owned_by", "kvx"},
                            {"max_model_len", model_.context}};
        res.set_content(dump_json({{"object", "list"}, {"data", json::array({model})}}), "application/json");
    });
    s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
        res.set_content(prometheus_text(scheduler_.metrics()), "text/plain; version=0.0.4");
    });
    auto generate = [this](Endpoint endpoint) {
        return [this, endpoint](const httplib::Request& req, httplib::Response& res) {
            json body;
            try {
                body = json::parse(req.body);
            } catch (const json::parse_error& e) {
                throw ApiError(400, std::string("the request body is not valid JSON: ") + e.what());
            }
            ApiRequest request = parse_api_request(endpoint, body, model_);
            auto answer = std::make_shared<ApiAnswer>(request, model_.id);
            auto open = std::make_shared<OpenAnswer>(open_answers_);
            const bool stream = request.stream;
            std::shared_ptr<RequestStream> events = submit(scheduler_, std::move(request.serve));
            if (stream)
                answer_stream(res, std::move(events), std::move(answer), std::move(open));
            else
                answer_whole(res, *events, *answer);
        };
    };
    s.Post("/v1/completions", generate(Endpoint::completions));
    s.Post("/v1/chat/completions", generate(Endpoint::chat));
}

}  // namespace kvx::serve
