// kvx serve: an OpenAI-compatible HTTP server (tools/kvx/serve/) over one engine, with continuous batching
// (engine/serving/scheduler.h). It listens on localhost unless told otherwise. SIGINT or SIGTERM stops it:
// new requests are refused, queued ones end, running ones may finish for --shutdown-grace seconds and are
// then cut (finish reason abort), and the process exits 0.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "backend_choice.h"
#include "commands.h"
#include "engine/cache/kv_cache_manager.h"
#include "engine/generation/load_tokenizer.h"
#include "engine/serving/scheduler.h"
#include "engine/serving/serving_kv_pool.h"
#include "kernels/error.h"
#include "serve/http_server.h"

namespace kvx::cli {
namespace {

struct ServeOptions {
    RunOptions run;
    serve::HttpOptions http;
    SchedulerOptions scheduler;
    int32_t kv_blocks = 0;
    int64_t kv_memory = 0;
    double shutdown_grace = 5;
    std::string alias;  // the model's id in the API; empty: the model directory's name
};

// --kv-blocks, else what --kv-memory holds, else the engine's default for max-seqs sequences.
int32_t pool_blocks(const ServeOptions& o, const ModelConfig& c, int32_t context) {
    ServingKvPoolRequest request;
    request.context = context;
    request.block_size = o.run.block_size;
    request.kv_dtype = kv_dtype_for(o.run.kv_dtype);
    request.max_seqs = o.scheduler.max_seqs;
    request.kv_blocks = o.kv_blocks;
    request.kv_memory = o.kv_memory;
    return serving_kv_pool_blocks(c, request);
}

void run_serve(ServeOptions o) {
    // Every thread started from here leaves SIGINT and SIGTERM to the one that waits for them.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
    signal(SIGPIPE, SIG_IGN);  // a client that went away is a failed write, not the end of the server

    LoadedModel loaded = load_model_for_run(o.run);
    const ModelConfig& config = loaded.model->config;
    const int32_t context = o.run.context > 0 ? o.run.context : config.max_seq_len;
    start_engine(loaded, o.run, pool_blocks(o, config, context), o.scheduler.step_tokens);
    Engine& engine = *loaded.engine;
    if (config.tokenizer_type.empty()) throw Error("the model has no tokenizer: kvx serve needs one to read text");
    const std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(loaded.model->dir, config);

    serve::ServedModel model;
    const std::filesystem::path dir = std::filesystem::path(loaded.model->dir).lexically_normal();
    model.id = !o.alias.empty()          ? o.alias
               : !dir.filename().empty() ? dir.filename().string()
                                         : dir.parent_path().filename().string();  // "dir/" names "dir"
    model.config = &config;
    model.tokenizer = tokenizer.get();
    model.context = engine.context();
    model.max_seqs = o.scheduler.max_seqs;
    try {
        model.chat.emplace(config, *tokenizer);
    } catch (const Error& e) {
        model.no_chat_reason = e.what();
    }

    if (o.http.threads == 0) o.http.threads = o.scheduler.max_seqs + 32;
    Scheduler scheduler(engine, *tokenizer, o.scheduler);
    serve::ApiServer server(model, scheduler, o.http);
    const int port = server.bind();
    const KvCacheUsage pool = engine.cache_usage();
    std::fprintf(stderr, "kvx serve: %s on http://%s:%d, context %d, %d sequences, %d KV blocks of %d tokens (%.1f MiB)\n",
                 model.id.c_str(), o.http.host.c_str(), port, engine.context(), o.scheduler.max_seqs, pool.blocks_total,
                 pool.block_size, static_cast<double>(pool.bytes_total()) / (1 << 20));

    // The forward passes run on this thread, whose OpenMP team loaded the weights. On a thread of their own they
    // had a second team: libgomp counts both teams' threads, and with more of them than cores a waiting worker
    // spins only briefly before it sleeps, so every parallel region of a decode step woke its workers through
    // the kernel. On 2 cores one stream then decoded at a third of kvx generate's speed (64 tokens in 0.9 s
    // against 0.27 s), and -t, set by omp_set_num_threads on this thread only, did not reach the engine's team.
    std::thread http_thread([&] { server.listen(); });
    std::thread stopper([&] {
        int signal_number = 0;
        sigwait(&stop_signals, &signal_number);
        std::fprintf(stderr, "kvx serve: %s: refusing new requests, ending the running ones\n",
                     signal_number == SIGINT ? "interrupted" : "terminated");
        scheduler.shutdown(std::chrono::milliseconds(static_cast<int64_t>(o.shutdown_grace * 1000)));
    });
    try {
        scheduler.run();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "kvx serve: the engine stopped: %s\n", e.what());
        kill(getpid(), SIGTERM);
    }
    stopper.join();
    server.stop(std::chrono::seconds(10));
    http_thread.join();
    std::fprintf(stderr, "kvx serve: stopped\n");
}

}  // namespace

void add_serve_command(CLI::App& app) {
    auto o = std::make_shared<ServeOptions>();
    CLI::App* cmd = app.add_subcommand("serve", "Serve the model over HTTP with the OpenAI API (continuous batching)");
    add_run_options(*cmd, o->run);
    cmd->add_option("--host", o->http.host, "Address to listen on (0.0.0.0: every interface)")->capture_default_str();
    cmd->add_option("--port", o->http.port, "Port to listen on; 0 = any free one (printed)")
        ->check(CLI::Range(0, 65535))
        ->capture_default_str();
    cmd->add_option("--max-seqs", o->scheduler.max_seqs, "Sequences in the running batch (a request with n choices holds n)")
        ->check(CLI::Range(1, 4096))
        ->capture_default_str();
    auto* blocks = cmd->add_option("--kv-blocks", o->kv_blocks, "KV cache blocks in the pool (default: see --kv-memory)")
                       ->check(CLI::PositiveNumber);
    cmd->add_option("--kv-memory", o->kv_memory,
                    "KV cache bytes (suffixes K, M, G; default: max-seqs sequences of the whole context, at most 1 GiB)")
        ->transform(CLI::AsSizeValue(false))
        ->excludes(blocks);
    cmd->add_option("--step-tokens", o->scheduler.step_tokens,
                    "Rows per forward pass: every decode row, then prompt chunks up to this")
        ->check(CLI::Range(1, 65536))
        ->capture_default_str();
    cmd->add_option("--max-queue", o->scheduler.max_waiting, "Requests waiting before new ones get 503")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
    cmd->add_option("--http-threads", o->http.threads,
                    "Connections served at once (a streaming request holds one; default: max-seqs + 32, so that "
                    "waiting requests reach the queue and its 503)")
        ->check(CLI::Range(1, 4096));
    cmd->add_option("--alias", o->alias, "The model's id in the API (default: the model directory's name)");
    cmd->add_option("--api-key", o->http.api_key, "Require 'Authorization: Bearer KEY' on every request but /health");
    cmd->add_option("--shutdown-grace", o->shutdown_grace,
                    "Seconds running requests may finish after SIGINT or SIGTERM")
        ->check(CLI::Range(0.0, 3600.0))
        ->capture_default_str();
    cmd->add_flag("--check-cache", o->scheduler.check_cache,
                  "Check the KV cache's invariants after every step (tests; failures counted in /metrics)");
    cmd->callback([o] { run_serve(*o); });
}

}  // namespace kvx::cli
