#include "beam_generate.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <string>

#include "cache_report.h"
#include "engine/generation/beam_search.h"
#include "kernels/error.h"
#include "output.h"

namespace kvx::cli {
namespace {

void print_beam_stats(const BeamSearchResult& r, const Engine& engine, int32_t num_beams) {
    const BeamSearchStats& s = r.stats;
    auto per_second = [](double count, double seconds) { return seconds > 0 ? count / seconds : 0.0; };
    auto mib = [](size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); };
    int stopped = 0;
    for (const BeamHypothesis& h : r.hypotheses) stopped += h.stopped_by_token ? 1 : 0;
    std::fprintf(stderr, "\nkvx: prompt %d tokens, prefill %.3f ms (%.1f tokens/s)\n", s.prompt_tokens,
                 s.prefill_seconds * 1e3, per_second(s.prompt_tokens, s.prefill_seconds));
    std::fprintf(stderr,
                 "kvx: beam search, %d beams: %d steps, %lld beam tokens in %.3f ms (%.1f tokens/s, %.1f steps/s); "
                 "%zu hypotheses, %d ended by a stop token; best score %.6f over %zu tokens\n",
                 num_beams, s.decode_steps, static_cast<long long>(s.decode_tokens), s.decode_seconds * 1e3,
                 per_second(static_cast<double>(s.decode_tokens), s.decode_seconds),
                 per_second(s.decode_steps, s.decode_seconds), r.hypotheses.size(), stopped,
                 r.hypotheses.empty() ? 0.0 : r.hypotheses[0].score,
                 r.hypotheses.empty() ? size_t{0} : r.hypotheses[0].tokens.size());
    const double ratio = s.peak_bytes_in_use > 0
                             ? static_cast<double>(s.contiguous_bytes) / static_cast<double>(s.peak_bytes_in_use)
                             : 0.0;
    std::fprintf(stderr,
                 "kvx: KV peak %d of %d blocks of %d tokens, %zu bytes (%.3f MiB) shared by the beams; a contiguous "
                 "cache per beam (%d beams x %d tokens) holds %zu bytes (%.3f MiB), %.2fx\n",
                 s.peak_blocks_in_use, engine.cache().pool().num_blocks(), engine.cache().block_size(),
                 s.peak_bytes_in_use, mib(s.peak_bytes_in_use), num_beams, s.max_beam_length, s.contiguous_bytes,
                 mib(s.contiguous_bytes), ratio);
    const double steps = std::max(s.decode_steps, 1);
    std::fprintf(stderr,
                 "kvx: KV copies %lld blocks, %.0f bytes per step (copy-on-write); a physical reorder moves %.0f "
                 "bytes per step\n",
                 static_cast<long long>(s.blocks_copied), static_cast<double>(s.bytes_copied) / steps,
                 static_cast<double>(s.reorder_bytes) / steps);
}

}  // namespace

void add_beam_options(CLI::App& cmd, BeamFlags& f) {
    cmd.add_option("--beams", f.beams,
                   "Beam search with this many beams (1-64) instead of sampling; prints the best hypothesis");
    cmd.add_option("--length-penalty", f.length_penalty,
                   "Beam search: a hypothesis scores sum(log p) / length^A; 0 = no normalisation")
        ->capture_default_str();
}

bool beam_search_requested(const CLI::App& cmd, const BeamFlags& f, const SamplingFlags& sampling) {
    if (cmd.count("--beams") == 0) {
        if (cmd.count("--length-penalty") != 0) throw Error("--length-penalty needs --beams");
        return false;
    }
    if (f.beams < 1 || f.beams > 64) throw Error("--beams must be from 1 to 64, not " + std::to_string(f.beams));
    if (!std::isfinite(f.length_penalty) || f.length_penalty < 0)
        throw Error("--length-penalty must be a finite number >= 0, not " + std::to_string(f.length_penalty));
    const char* sampling_flag = cmd.count("--temp") != 0 && sampling.sampling.temperature != 0 ? "--temp > 0"
                                : cmd.count("--top-k") != 0                                  ? "--top-k"
                                : cmd.count("--top-p") != 0                                  ? "--top-p"
                                                                                             : nullptr;
    if (sampling_flag)
        throw Error(std::string("--beams is deterministic and cannot be combined with ") + sampling_flag +
                    " (sampling)");
    return true;
}

void run_beam_generate(LoadedModel& loaded, const RunOptions& run, const Tokenizer& tokenizer,
                       const std::vector<int32_t>& prompt, int n_new, const BeamFlags& f, bool verbose) {
    const ModelConfig& config = loaded.model->config;
    const int64_t context = run.context > 0 ? run.context : config.max_seq_len;
    if (n_new < -1 || n_new == 0) throw Error("--beams needs -n >= 1, or -1 for up to the context");
    BeamSearchOptions options;
    options.num_beams = f.beams;
    options.length_penalty = f.length_penalty;
    const int64_t up_to_context = std::max<int64_t>(context - static_cast<int64_t>(prompt.size()), 1);
    options.max_new_tokens = static_cast<int32_t>(n_new >= 0 ? n_new : up_to_context);
    options.stop_token_ids = config.eos_token_ids;
    // The engine's default pool holds one sequence; the beams need their own blocks past the shared prompt.
    const int64_t blocks = beam_search_blocks_needed(static_cast<int64_t>(prompt.size()), options, run.block_size);
    // Beyond int32 the tokens cannot fit the context either: the default pool, and beam_search says so.
    start_engine(loaded, run, blocks > INT32_MAX ? 0 : static_cast<int32_t>(blocks));
    if (verbose) log_cache_events(*loaded.engine);

    const BeamSearchResult result = beam_search(*loaded.engine, prompt, options);
    std::string text;
    int32_t prev = -1;
    auto emit = [&](int32_t token) {
        text += tokenizer.decode(prev, token);
        prev = token;
    };
    for (int32_t token : prompt) emit(token);
    if (!result.hypotheses.empty()) {
        const BeamHypothesis& best = result.hypotheses.front();
        const size_t n = best.tokens.size() - (best.stopped_by_token ? 1 : 0);  // the stop token is not printed
        for (size_t i = 0; i < n; ++i) emit(best.tokens[i]);
    }
    write_out(text + "\n");
    print_beam_stats(result, *loaded.engine, f.beams);
    print_weight_format(*loaded.model);
    print_peak_rss();
}

}  // namespace kvx::cli
