#include "engine/generation/beam_search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "engine/generation/seconds_since.h"
#include "kernels/error.h"

namespace kvx {
namespace {

struct Beam {
    SeqId seq;                    // a sequence of prompt + tokens (less the last, until it is decoded)
    std::vector<int32_t> tokens;  // generated so far
    double sum_logprobs = 0;
};

struct Candidate {
    double score;  // parent's sum_logprobs + log_softmax of the token
    int32_t beam;  // index into this step's beams
    int32_t token;
};

// The ranking of step 2: higher score first, then the lower beam, then the lower token.
bool ranks_before(const Candidate& a, const Candidate& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.beam != b.beam) return a.beam < b.beam;
    return a.token < b.token;
}

// log(sum_v exp(x_v - m)) + m over one row of logits [vocab], in double.
double log_sum_exp(const float* logits, int vocab) {
    const double m = *std::max_element(logits, logits + vocab);
    double sum = 0;
    for (int v = 0; v < vocab; ++v) sum += std::exp(double{logits[v]} - m);
    return m + std::log(sum);
}

// Keeps the best `limit` candidates of one beam in `heap` (a heap whose top is the worst kept).
void offer(std::vector<Candidate>& heap, size_t limit, const Candidate& c) {
    if (heap.size() < limit) {
        heap.push_back(c);
        std::push_heap(heap.begin(), heap.end(), ranks_before);
    } else if (ranks_before(c, heap.front())) {
        std::pop_heap(heap.begin(), heap.end(), ranks_before);
        heap.back() = c;
        std::push_heap(heap.begin(), heap.end(), ranks_before);
    }
}

// Every candidate that the walk of step 3 can reach, ranked. A beam contributes its best N non-stop
// tokens and its best N stop tokens: a non-stop candidate among the first N non-stop ones overall, or a stop
// candidate ranked below N overall, is among its own beam's best N of its kind, and every candidate ranked
// above either is kept too, so ranks below N and the order of non-stop candidates are exact.
void rank_candidates(const std::vector<Beam>& beams, const float* logits, int vocab, int32_t n,
                     const std::vector<char>& is_stop, std::vector<Candidate>& ranked) {
    ranked.clear();
    std::vector<Candidate> best, best_stops;  // heaps, [<= n] each
    for (size_t b = 0; b < beams.size(); ++b) {
        const float* row = logits + b * static_cast<size_t>(vocab);  // [vocab]
        const double offset = beams[b].sum_logprobs - log_sum_exp(row, vocab);
        best.clear();
        best_stops.clear();
        for (int v = 0; v < vocab; ++v) {
            const Candidate c{double{row[v]} + offset, static_cast<int32_t>(b), v};
            offer(is_stop[static_cast<size_t>(v)] ? best_stops : best, static_cast<size_t>(n), c);
        }
        ranked.insert(ranked.end(), best.begin(), best.end());
        ranked.insert(ranked.end(), best_stops.begin(), best_stops.end());
    }
    std::sort(ranked.begin(), ranked.end(), ranks_before);
}

// Step 4's list of at most n hypotheses.
void add_hypothesis(std::vector<BeamHypothesis>& kept, size_t n, std::vector<int32_t> tokens, double sum_logprobs,
                    bool stopped, float length_penalty) {
    const double score = sum_logprobs / std::pow(static_cast<double>(tokens.size()), double{length_penalty});
    if (kept.size() >= n) {
        // The worst kept; among equal scores the latest added.
        size_t worst = 0;
        for (size_t i = 1; i < kept.size(); ++i)
            if (kept[i].score <= kept[worst].score) worst = i;
        if (!(score > kept[worst].score)) return;
        kept.erase(kept.begin() + static_cast<std::ptrdiff_t>(worst));
    }
    kept.push_back({std::move(tokens), score, sum_logprobs, stopped});
}

void check_options(const Engine& engine, std::span<const int32_t> prompt, const BeamSearchOptions& o) {
    if (o.num_beams < 1 || o.num_beams > 64)
        throw Error("the number of beams must be from 1 to 64, not " + std::to_string(o.num_beams));
    if (!std::isfinite(o.length_penalty) || o.length_penalty < 0)
        throw Error("the length penalty must be a finite number >= 0, not " + std::to_string(o.length_penalty));
    if (o.max_new_tokens < 1)
        throw Error("beam search needs at least one new token, not " + std::to_string(o.max_new_tokens));
    if (prompt.empty()) throw Error("beam search needs a prompt of at least one token");
    const int64_t total = static_cast<int64_t>(prompt.size()) + o.max_new_tokens;
    if (total > engine.context())
        throw Error("the prompt (" + std::to_string(prompt.size()) + " tokens) and " +
                    std::to_string(o.max_new_tokens) + " new tokens exceed the context of " +
                    std::to_string(engine.context()) + " tokens: raise -c or lower -n");
    const int64_t needed =
        beam_search_blocks_needed(static_cast<int64_t>(prompt.size()), o, engine.cache().block_size());
    const int32_t available = engine.cache().pool().num_available();
    if (needed > available)
        throw Error("KV cache pool exhausted: " + std::to_string(o.num_beams) + " beams over " +
                    std::to_string(total) + " tokens may need " + std::to_string(needed) + " blocks but " +
                    std::to_string(available) + " of " + std::to_string(engine.cache().pool().num_blocks()) +
                    " are free");
}

void record_usage(const Engine& engine, BeamSearchStats& stats) {
    const KvCacheUsage usage = engine.cache_usage();
    stats.peak_blocks_in_use = std::max(stats.peak_blocks_in_use, usage.blocks_in_use);
    stats.peak_bytes_in_use = std::max(stats.peak_bytes_in_use, usage.bytes_in_use());
}

// Frees seq and forgets it in `live`.
void release(Engine& engine, std::vector<SeqId>& live, SeqId seq) {
    engine.free_sequence(seq);
    live.erase(std::find(live.begin(), live.end(), seq));
}

// The search itself; `live` holds every sequence it made and has not freed, for the caller to free whatever
// happens.
void search(Engine& engine, std::span<const int32_t> prompt, const BeamSearchOptions& o, std::vector<SeqId>& live,
            BeamSearchResult& result) {
    BeamSearchStats& stats = result.stats;
    const size_t n = static_cast<size_t>(o.num_beams);
    const int vocab = engine.vocab_size();
    // K/V bytes of one token over every layer, whichever layer group holds them: what a contiguous cache stores.
    size_t bytes_per_token = 0;
    for (size_t g = 0; g < engine.cache_groups().num_groups(); ++g)
        bytes_per_token += engine.plan().kv().bytes_per_block(g) / static_cast<size_t>(engine.cache().block_size());
    std::vector<char> is_stop(static_cast<size_t>(vocab), 0);  // [vocab]
    for (int id : o.stop_token_ids)
        if (id >= 0 && id < vocab) is_stop[static_cast<size_t>(id)] = 1;

    auto start = std::chrono::steady_clock::now();
    live.push_back(engine.new_sequence());
    std::vector<Beam> beams = {{live[0], {}, 0.0}};
    const std::vector<float>* logits = &engine.forward({{live[0], prompt, false}});  // [beams][vocab]
    stats.prompt_tokens = static_cast<int32_t>(prompt.size());
    stats.prefill_seconds = seconds_since(start);
    stats.max_beam_length = stats.prompt_tokens;
    record_usage(engine, stats);

    start = std::chrono::steady_clock::now();
    std::vector<Candidate> ranked;
    std::vector<Candidate> chosen;     // next beams' candidates, rank order
    std::vector<Beam> next;
    std::vector<SequenceInput> inputs;
    std::vector<int32_t> next_tokens;  // [next beams], the token each decodes
    auto& kept = result.hypotheses;
    for (int32_t t = 0; t < o.max_new_tokens; ++t) {
        rank_candidates(beams, logits->data(), vocab, o.num_beams, is_stop, ranked);
        ++stats.selection_steps;
        chosen.clear();
        for (size_t r = 0; r < ranked.size() && chosen.size() < n; ++r) {
            const Candidate& c = ranked[r];
            if (!is_stop[static_cast<size_t>(c.token)]) {
                chosen.push_back(c);
            } else if (r < n) {
                std::vector<int32_t> tokens = beams[static_cast<size_t>(c.beam)].tokens;
                tokens.push_back(c.token);
                add_hypothesis(kept, n, std::move(tokens), c.score, true, o.length_penalty);
            }
        }
        if (kept.size() >= n || chosen.empty()) break;
        if (t + 1 == o.max_new_tokens) {  // the last tokens need no forward pass
            for (const Candidate& c : chosen) {
                std::vector<int32_t> tokens = beams[static_cast<size_t>(c.beam)].tokens;
                tokens.push_back(c.token);
                add_hypothesis(kept, n, std::move(tokens), c.score, false, o.length_penalty);
            }
            break;
        }

        // Parents without children go first, so that their blocks are free for the copies of this step.
        std::vector<int32_t> children(beams.size(), 0);
        for (const Candidate& c : chosen) ++children[static_cast<size_t>(c.beam)];
        for (size_t b = 0; b < beams.size(); ++b)
            if (children[b] == 0) release(engine, live, beams[b].seq);
        next.clear();
        for (const Candidate& c : chosen) {
            const size_t b = static_cast<size_t>(c.beam);
            Beam child{beams[b].seq, beams[b].tokens, c.score};
            child.tokens.push_back(c.token);
            // The first child continues the parent's sequence (the last one to be handed out), the others fork
            // it before anything is appended, sharing every block.
            if (--children[b] > 0) {
                child.seq = engine.fork_sequence(beams[b].seq);
                live.push_back(child.seq);
            }
            next.push_back(std::move(child));
        }
        beams.swap(next);

        const int32_t length = engine.length(beams[0].seq);  // every beam holds prompt + t tokens
        stats.reorder_bytes += beams.size() * static_cast<size_t>(length) * bytes_per_token;
        next_tokens.clear();
        for (const Beam& beam : beams) next_tokens.push_back(beam.tokens.back());
        inputs.clear();
        for (size_t b = 0; b < beams.size(); ++b) inputs.push_back({beams[b].seq, {&next_tokens[b], 1}, false});
        logits = &engine.forward(inputs);
        ++stats.decode_steps;
        stats.decode_tokens += static_cast<int64_t>(beams.size());
        for (size_t g = 0; g < engine.last_copies().size(); ++g) {
            const size_t copies = engine.last_copies()[g].size();
            stats.blocks_copied += static_cast<int64_t>(copies);
            stats.bytes_copied += copies * engine.plan().kv().bytes_per_block(g);
        }
        stats.max_beam_length = length + 1;
        record_usage(engine, stats);
    }
    stats.decode_seconds = seconds_since(start);
    stats.contiguous_bytes = n * static_cast<size_t>(stats.max_beam_length) * bytes_per_token;
    std::stable_sort(kept.begin(), kept.end(),
                     [](const BeamHypothesis& a, const BeamHypothesis& b) { return a.score > b.score; });
}

}  // namespace

int64_t beam_search_blocks_needed(int64_t prompt_len, const BeamSearchOptions& options, int32_t block_size) {
    const int64_t bs = std::max(block_size, 1);
    const int64_t shared = prompt_len / bs;
    const int64_t per_beam = (prompt_len + options.max_new_tokens + bs - 1) / bs - shared;
    return shared + int64_t{std::max(options.num_beams, 1)} * per_beam;
}

BeamSearchResult beam_search(Engine& engine, std::span<const int32_t> prompt, const BeamSearchOptions& options) {
    check_options(engine, prompt, options);
    BeamSearchResult result;
    std::vector<SeqId> live;
    auto free_all = [&] {
        for (SeqId seq : live) engine.free_sequence(seq);
        live.clear();
    };
    try {
        search(engine, prompt, options, live, result);
    } catch (...) {
        free_all();
        throw;
    }
    free_all();
    return result;
}

}  // namespace kvx
