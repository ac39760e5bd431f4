// Continuous batching over the paged KV cache: one engine thread runs a step loop, and requests join and
// leave the running batch at every step.
//
// A step:
//   1. drops requests whose client went away (their sequences are freed now);
//   2. admits waiting requests, oldest first, while there are sequence slots and the pool has the blocks for
//      their prompts (a prompt starts on the longest prefix of whole blocks already cached: Engine::start_sequence);
//   3. plans one forward pass: the decode row of every running sequence, then prefill chunks of the ones still
//      reading their prompts, up to step_tokens rows, so a long prompt does not stall everyone's decode;
//   4. while the pool cannot supply that pass, preempts the newest sequence: its blocks are freed, and it is
//      queued again to recompute its prompt and tokens so far (each row's logits are computed alone, bit for
//      bit the same in any batch, so the recomputation resumes exactly where it stopped);
//   5. runs the pass, and samples each finished row with its own request's sampler and RNG, streaming each
//      token to its request as soon as it is sampled.
//
// A request with n > 1 choices prefills its prompt once; when the prompt is done the sequence forks (the
// children share every block, copy on write) and each choice samples from the same last row with its own seed.
// The tokens a request gets do not depend on what else is in the batch: greedy and seeded choices give what
// generate() gives alone (the sampler is called once per token, in order, on the same logits).
#pragma once

#include <atomic>
#include <climits>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/runtime/engine.h"
#include "engine/serving/request_stream.h"
#include "engine/serving/serve_request.h"
#include "engine/serving/serving_metrics.h"
#include "engine/tokenizer/tokenizer.h"

namespace kvx {

struct SchedulerOptions {
    int32_t max_seqs = 16;      // sequences in the running batch (a request holds n)
    int32_t max_waiting = 256;  // requests queued before submit refuses more
    int32_t step_tokens = 128;  // rows per forward pass: every decode row, then prefill chunks up to this
    bool check_cache = false;   // check the cache's invariants after every step (tests; costs a walk of the pool)
};

class Scheduler {
public:
    // The engine and tokenizer must outlive the scheduler; only the engine thread (run) touches the engine.
    Scheduler(Engine& engine, const Tokenizer& tokenizer, SchedulerOptions options);
    ~Scheduler();
    Scheduler(const Scheduler&) = delete;
    Scheduler& operator=(const Scheduler&) = delete;

    // Any thread. Queues a request and returns its stream; null when the queue is full or the scheduler is
    // shutting down (a server answers 503). Throws kvx::Error for a request that can never run: an empty
    // prompt, a token outside the vocabulary, prompt + max_tokens beyond the context, more KV blocks than the
    // pool has, n beyond max_seqs, sampling options out of range.
    std::shared_ptr<RequestStream> submit(ServeRequest request);
    bool accepting() const;

    // The engine thread: steps until shutdown() and every request has ended.
    void run();
    // Any thread: refuses new requests and ends queued ones now; running ones may finish for `grace`, then
    // end with finish reason abort. run() returns once none is left.
    void shutdown(std::chrono::milliseconds grace);

    ServingMetrics metrics() const;

private:
    struct Request;
    struct Choice;
    using Clock = std::chrono::steady_clock;

    void take_incoming();
    void end_cancelled();
    void admit();
    // Fills step_ with the next pass's choices and row counts; preempts until the pool can supply it.
    void plan_step();
    // Plans and runs one pass, samples its finished rows, and counts the rows it computed.
    void run_step(uint64_t& prefill_rows, uint64_t& decode_rows);
    void sample(Choice& c, const float* logits);
    void fork_siblings(Choice& first);
    // A choice that ended by itself: `delta` (its last token, if any) goes out with the reason.
    void finish_choice(Choice& c, FinishReason reason, ChoiceDelta delta);
    // Every open choice of r ends with `reason`; with an error the stream fails instead of finishing.
    void end_request(Request& r, FinishReason reason, const std::string* error);
    // Takes c out of the waiting or running list; sends `last` (null: nothing) with the text its stop strings
    // held back and the reason.
    void close_choice(Choice& c, FinishReason reason, ChoiceDelta* last);
    void close_request(Request& r, FinishReason reason, const std::string* error);
    void preempt(Choice& c);
    void remove_running(Choice& c);
    void sweep_finished();
    void publish_metrics(uint64_t prefill_rows, uint64_t decode_rows);
    int32_t slots_for(const Choice& c) const;

    Engine& engine_;
    const Tokenizer& tokenizer_;
    const SchedulerOptions options_;

    // Read by submitting threads, fixed at construction (the cache itself is the engine thread's alone).
    int32_t block_size_ = 16;
    int32_t full_pool_blocks_ = INT32_MAX;  // the smallest pool of a group without a window

    // Shared with submitting threads, under mutex_.
    mutable std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<std::unique_ptr<Request>> incoming_;
    bool stopping_ = false;
    Clock::time_point abort_after_;
    std::atomic<int32_t> queued_{0};  // requests queued or waiting for admission, for the 503 limit
    uint64_t next_id_ = 0;

    // The engine thread's own.
    std::vector<std::unique_ptr<Request>> requests_;  // live, oldest first
    std::deque<Choice*> waiting_;                     // oldest first
    std::vector<Choice*> running_;                    // holding a sequence, oldest first
    int32_t slots_in_use_ = 0;
    struct Row {
        Choice* choice;
        int32_t count;
    };
    std::vector<Row> step_;
    std::vector<SequenceInput> inputs_;
    TokenRate rate_{10.0};

    mutable std::mutex metrics_mutex_;
    ServingMetrics metrics_;
};

}  // namespace kvx
