#include "engine/serving/scheduler.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "engine/cache/kv_cache_manager.h"
#include "engine/serving/stop_strings.h"
#include "engine/serving/token_logprobs.h"
#include "kernels/error.h"

namespace kvx {

struct Scheduler::Request {
    ServeRequest r;
    std::shared_ptr<RequestStream> stream = std::make_shared<RequestStream>();
    uint64_t id = 0;
    Clock::time_point arrival = Clock::now();
    bool first_token_sent = false;
    bool started = false;  // the first choice was admitted once
    bool forked = false;   // the siblings have their sequences (or n is 1)
    bool ended = false;
    int32_t open_choices = 0;
    ServeUsage usage;
    std::vector<std::unique_ptr<Choice>> choices;  // [n]
};

struct Scheduler::Choice {
    enum class State { waiting, running, awaiting_fork, finished };
    Request* request = nullptr;
    int32_t index = 0;
    State state = State::waiting;
    SeqId seq = -1;
    std::vector<int32_t> tokens;  // prompt, then every sampled token that is to be appended
    int32_t fed = 0;              // tokens[0..fed) are in the cache
    int32_t prev = -1;            // the last token, for the next token's text
    int32_t generated = 0;
    Sampler sampler;
    StopStrings stops;
    Clock::time_point last_token;

    Choice(Request& r, int32_t i, SamplerOptions sampling)
        : request(&r), index(i), tokens(r.r.prompt), prev(r.r.prompt.back()), sampler(sampling), stops(r.r.stop) {}
    bool older_than(const Choice& o) const {
        return request->id != o.request->id ? request->id < o.request->id : index < o.index;
    }
};

namespace {

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Puts c into `queue` (oldest first) after every choice older than it.
template <class Queue, class Item>
void insert_by_age(Queue& queue, Item* c) {
    queue.insert(std::upper_bound(queue.begin(), queue.end(), c,
                                  [](const Item* a, const Item* b) { return a->older_than(*b); }),
                 c);
}

}  // namespace

Scheduler::Scheduler(Engine& engine, const Tokenizer& tokenizer, SchedulerOptions options)
    : engine_(engine), tokenizer_(tokenizer), options_(options) {
    if (options_.max_seqs < 1) throw Error("--max-seqs must be at least 1");
    if (options_.max_waiting < 1) throw Error("the request queue must hold at least 1 request");
    if (options_.step_tokens < 1) throw Error("a step must take at least 1 token");
    metrics_.kv = engine_.cache_usage_by_group();
    const KvCacheGroups& groups = engine_.cache_groups();
    block_size_ = groups.block_size();
    for (size_t g = 0; g < groups.num_groups(); ++g)  // a windowed group is bounded by its window, and sized for it
        if (groups.spec(g).window == 0)
            full_pool_blocks_ = std::min(full_pool_blocks_, groups.group(g).pool().num_blocks());
}

Scheduler::~Scheduler() = default;

bool Scheduler::accepting() const {
    std::lock_guard lock(mutex_);
    return !stopping_;
}

std::shared_ptr<RequestStream> Scheduler::submit(ServeRequest request) {
    const ServeRequest& q = request;
    if (q.prompt.empty()) throw Error("the prompt is empty and the model has no BOS token to start from");
    for (int32_t t : q.prompt)
        if (t < 0 || t >= engine_.vocab_size())
            throw Error("token id " + std::to_string(t) + " is outside the vocabulary of " +
                        std::to_string(engine_.vocab_size()));
    if (q.max_tokens < 0) throw Error("max_tokens must be at least 0");
    const int64_t total = static_cast<int64_t>(q.prompt.size()) + q.max_tokens;
    if (total > engine_.context())
        throw Error("the prompt (" + std::to_string(q.prompt.size()) + " tokens) and max_tokens " +
                    std::to_string(q.max_tokens) + " exceed the context of " + std::to_string(engine_.context()) +
                    " tokens");
    if (q.n < 1 || q.n > options_.max_seqs)
        throw Error("n must be from 1 to " + std::to_string(options_.max_seqs) + " (the server's --max-seqs)");
    // One choice alone must fit the pool, or preemption could never make room for it.
    const int32_t needed = blocks_for(total, block_size_) + 1;
    if (needed > full_pool_blocks_)
        throw Error("the prompt and max_tokens need " + std::to_string(needed) + " KV blocks, more than the " +
                    std::to_string(full_pool_blocks_) + " the server's pool has");
    Sampler check(q.sampling);  // throws for out-of-range options

    auto r = std::make_unique<Request>();
    r->r = std::move(request);
    r->usage.prompt_tokens = static_cast<int32_t>(r->r.prompt.size());
    r->open_choices = r->r.n;
    for (int32_t i = 0; i < r->r.n; ++i) {
        SamplerOptions sampling = r->r.sampling;
        sampling.seed += static_cast<uint64_t>(i);
        r->choices.push_back(std::make_unique<Choice>(*r, i, sampling));
        if (i > 0) r->choices.back()->state = Choice::State::awaiting_fork;
    }
    std::shared_ptr<RequestStream> stream = r->stream;
    {
        std::lock_guard lock(mutex_);
        if (stopping_) return nullptr;
        if (queued_.load() >= options_.max_waiting) {
            std::lock_guard metrics_lock(metrics_mutex_);
            ++metrics_.requests_rejected;
            return nullptr;
        }
        r->id = next_id_++;
        ++queued_;
        incoming_.push_back(std::move(r));
    }
    wake_.notify_one();
    return stream;
}

void Scheduler::shutdown(std::chrono::milliseconds grace) {
    {
        std::lock_guard lock(mutex_);
        if (!stopping_) abort_after_ = Clock::now() + grace;
        stopping_ = true;
    }
    wake_.notify_one();
}

void Scheduler::take_incoming() {
    std::unique_lock lock(mutex_);
    wake_.wait(lock, [&] { return !incoming_.empty() || stopping_ || !requests_.empty(); });
    while (!incoming_.empty()) {
        requests_.push_back(std::move(incoming_.front()));
        incoming_.pop_front();
        waiting_.push_back(requests_.back()->choices[0].get());
    }
    if (!stopping_) return;
    const bool past_grace = Clock::now() >= abort_after_;
    lock.unlock();
    for (auto& r : requests_)
        if (!r->ended && (past_grace || !r->started)) r->stream->cancel();
}

int32_t Scheduler::slots_for(const Choice& c) const {
    return c.index == 0 && !c.request->forked ? c.request->r.n : 1;
}

void Scheduler::remove_running(Choice& c) {
    running_.erase(std::find(running_.begin(), running_.end(), &c));
    slots_in_use_ -= slots_for(c);
    if (c.seq >= 0) engine_.free_sequence(c.seq);
    c.seq = -1;
    c.fed = 0;
}

void Scheduler::close_choice(Choice& c, FinishReason reason, ChoiceDelta* last) {
    if (c.state == Choice::State::running) remove_running(c);
    if (c.state == Choice::State::waiting) waiting_.erase(std::find(waiting_.begin(), waiting_.end(), &c));
    c.state = Choice::State::finished;
    if (!last) return;
    last->text += c.stops.flush();
    last->finish = reason;
    c.request->stream->push(std::move(*last));
}

void Scheduler::close_request(Request& r, FinishReason reason, const std::string* error) {
    r.open_choices = 0;
    r.ended = true;
    if (error)
        r.stream->fail(*error);
    else
        r.stream->finish(r.usage);
    std::lock_guard lock(metrics_mutex_);
    ++(reason == FinishReason::abort ? metrics_.requests_aborted : metrics_.requests_finished);
}

void Scheduler::end_request(Request& r, FinishReason reason, const std::string* error) {
    for (auto& c : r.choices) {
        if (c->state == Choice::State::finished) continue;
        ChoiceDelta last;
        last.choice = c->index;
        close_choice(*c, reason, error ? nullptr : &last);
    }
    close_request(r, reason, error);
}

void Scheduler::end_cancelled() {
    for (auto& r : requests_)
        if (!r->ended && r->stream->cancelled()) end_request(*r, FinishReason::abort, nullptr);
}

void Scheduler::sweep_finished() {
    std::erase_if(requests_, [](const std::unique_ptr<Request>& r) { return r->ended; });
    int32_t unstarted = 0;
    for (const auto& r : requests_) unstarted += r->started ? 0 : 1;
    std::lock_guard lock(mutex_);
    queued_ = unstarted + static_cast<int32_t>(incoming_.size());
}

void Scheduler::admit() {
    while (!waiting_.empty()) {
        Choice& c = *waiting_.front();
        const int32_t slots = slots_for(c);
        if (slots_in_use_ + slots > options_.max_seqs) break;
        // Blocks for the part of its tokens not cached, and one per running sequence for this step's decode row.
        const int32_t cached = engine_.cache().cached_prefix_blocks(c.tokens) * block_size_;
        const int64_t needed = blocks_for(static_cast<int64_t>(c.tokens.size()) - cached, block_size_) + 1 +
                               static_cast<int64_t>(running_.size());
        if (!running_.empty() && needed > engine_.cache().pool().num_available()) break;
        const SequenceStart start = engine_.start_sequence(c.tokens);
        c.seq = start.seq;
        c.fed = start.cached_tokens;
        c.state = Choice::State::running;
        Request& r = *c.request;
        if (!r.started) {
            r.started = true;
            r.usage.cached_tokens = start.cached_tokens;
            std::lock_guard lock(metrics_mutex_);
            metrics_.prompt_tokens += r.r.prompt.size();
            metrics_.cached_prompt_tokens += static_cast<uint64_t>(start.cached_tokens);
        }
        waiting_.pop_front();
        insert_by_age(running_, &c);
        slots_in_use_ += slots;
    }
}

void Scheduler::preempt(Choice& c) {
    remove_running(c);
    c.state = Choice::State::waiting;
    insert_by_age(waiting_, &c);
    std::lock_guard lock(metrics_mutex_);
    ++metrics_.preemptions;
}

void Scheduler::plan_step() {
    for (;;) {
        step_.clear();
        inputs_.clear();
        int32_t budget = options_.step_tokens;
        for (Choice* c : running_)  // decode rows first: every running sequence advances every step
            if (c->tokens.size() - static_cast<size_t>(c->fed) == 1) {
                step_.push_back({c, 1});
                --budget;
            }
        for (Choice* c : running_) {
            const auto remaining = static_cast<int32_t>(c->tokens.size()) - c->fed;
            if (remaining <= 1) continue;
            const int32_t count = std::min({remaining, budget, engine_.max_chunk()});
            if (count <= 0) break;
            step_.push_back({c, count});
            budget -= count;
        }
        for (const Row& row : step_)
            inputs_.push_back({row.choice->seq,
                               std::span<const int32_t>(row.choice->tokens).subspan(static_cast<size_t>(row.choice->fed),
                                                                                    static_cast<size_t>(row.count)),
                               false});
        if (engine_.pool_fits(inputs_)) return;
        if (running_.size() == 1) {  // submit() checked that one choice fits the pool: this is a bug
            const std::string error = "internal: the KV pool cannot hold a single sequence's step";
            end_request(*running_.front()->request, FinishReason::abort, &error);
            continue;
        }
        preempt(*running_.back());
    }
}

void Scheduler::fork_siblings(Choice& first) {
    Request& r = *first.request;
    r.forked = true;
    for (auto& sibling : r.choices) {
        Choice& s = *sibling;
        if (s.state != Choice::State::awaiting_fork) continue;
        s.seq = engine_.fork_sequence(first.seq);
        s.tokens = first.tokens;
        s.fed = first.fed;
        s.state = Choice::State::running;
        insert_by_age(running_, &s);
    }
}

void Scheduler::finish_choice(Choice& c, FinishReason reason, ChoiceDelta delta) {
    close_choice(c, reason, &delta);
    if (--c.request->open_choices == 0) close_request(*c.request, reason, nullptr);
}

void Scheduler::sample(Choice& c, const float* logits) {
    Request& r = *c.request;
    ChoiceDelta delta;
    delta.choice = c.index;
    SampledToken sampled;
    sampled.token = c.sampler.sample(logits, engine_.vocab_size());
    const std::vector<int32_t>& stops = r.r.stop_token_ids;
    if (std::find(stops.begin(), stops.end(), sampled.token) != stops.end())
        return finish_choice(c, FinishReason::stop, std::move(delta));

    if (r.r.top_logprobs >= 0) {
        fill_logprobs(logits, engine_.vocab_size(), r.r.top_logprobs, sampled);
        for (TokenLogprob& alt : sampled.top) alt.piece = tokenizer_.decode(c.prev, alt.token);
    }
    sampled.piece = tokenizer_.decode(c.prev, sampled.token);
    c.prev = sampled.token;
    ++c.generated;
    ++r.usage.completion_tokens;
    delta.text = c.stops.feed(sampled.piece);
    delta.tokens.push_back(std::move(sampled));

    const Clock::time_point now = Clock::now();
    {
        std::lock_guard lock(metrics_mutex_);
        if (!r.first_token_sent)
            metrics_.time_to_first_token.observe(seconds(now - r.arrival));
        else if (c.generated > 1)
            metrics_.time_per_output_token.observe(seconds(now - c.last_token));
    }
    r.first_token_sent = true;
    c.last_token = now;

    if (c.stops.matched()) return finish_choice(c, FinishReason::stop, std::move(delta));
    if (c.generated >= r.r.max_tokens) return finish_choice(c, FinishReason::length, std::move(delta));
    c.tokens.push_back(c.prev);  // fed by the next step
    r.stream->push(std::move(delta));
}

void Scheduler::run_step(uint64_t& prefill_rows, uint64_t& decode_rows) {
    plan_step();
    if (step_.empty()) return;
    const std::vector<float>* logits = nullptr;
    try {
        logits = &engine_.forward(inputs_);
    } catch (const std::exception& e) {  // the engine changed nothing: end the step's requests, keep serving
        const std::string error = std::string("the forward pass failed: ") + e.what();
        for (const Row& row : step_)
            if (!row.choice->request->ended) end_request(*row.choice->request, FinishReason::abort, &error);
        step_.clear();
        return;
    }
    const auto vocab = static_cast<size_t>(engine_.vocab_size());
    for (size_t i = 0; i < step_.size(); ++i) {
        Choice& c = *step_[i].choice;
        const bool decode = c.generated > 0 && step_[i].count == 1;
        (decode ? decode_rows : prefill_rows) += static_cast<uint64_t>(step_[i].count);
        c.fed += step_[i].count;
        if (static_cast<size_t>(c.fed) < c.tokens.size()) continue;  // more prompt to read
        const float* row = logits->data() + i * vocab;
        const bool forks = c.index == 0 && !c.request->forked;
        if (forks) fork_siblings(c);
        sample(c, row);
        if (forks)
            for (auto& s : c.request->choices)
                if (s.get() != &c && s->state == Choice::State::running && s->generated == 0) sample(*s, row);
    }
}

void Scheduler::publish_metrics(uint64_t prefill_rows, uint64_t decode_rows) {
    const double now = seconds(Clock::now().time_since_epoch());
    uint64_t failures = 0;
    if (options_.check_cache) {
        try {
            engine_.cache_groups().check_invariants();
        } catch (const Error& e) {
            std::fprintf(stderr, "kvx serve: KV cache invariant broken: %s\n", e.what());
            failures = 1;
        }
    }
    int32_t running = 0;
    for (const auto& r : requests_) running += !r->ended && r->started ? 1 : 0;
    std::lock_guard lock(metrics_mutex_);
    if (prefill_rows + decode_rows > 0) {
        rate_.add(now, prefill_rows, decode_rows);
        ++metrics_.steps;
        metrics_.batched_steps += step_.size() > 1 ? 1 : 0;
    }
    rate_.rates(now, metrics_.prefill_tokens_per_second, metrics_.decode_tokens_per_second);
    metrics_.prefill_tokens += prefill_rows;
    metrics_.decode_tokens += decode_rows;
    metrics_.cache_check_failures += failures;
    metrics_.requests_running = running;
    metrics_.requests_waiting = queued_.load();
    metrics_.kv = engine_.cache_usage_by_group();
}

void Scheduler::run() {
    for (;;) {
        take_incoming();
        end_cancelled();
        admit();
        uint64_t prefill_rows = 0, decode_rows = 0;
        run_step(prefill_rows, decode_rows);
        sweep_finished();
        publish_metrics(prefill_rows, decode_rows);
        std::lock_guard lock(mutex_);
        if (stopping_ && requests_.empty() && incoming_.empty()) return;
    }
}

ServingMetrics Scheduler::metrics() const {
    std::lock_guard lock(metrics_mutex_);
    return metrics_;
}

}  // namespace kvx
