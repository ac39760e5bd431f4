// kvx generate: text in, text out, streamed, with prefill and decode speed on stderr at the end. The prompt
// may be token ids instead (--tokens); a model without a tokenizer then writes token ids too, and so does any
// model with --print-ids (benchmarks compare greedy ids with other engines'). --ignore-eos generates exactly
// -n tokens, so that decode speeds over a fixed number of tokens can be compared.
#include <cstdio>

#include "backend_choice.h"
#include "beam_generate.h"
#include "cache_report.h"
#include "commands.h"
#include "engine/generation/generator.h"
#include "engine/generation/load_tokenizer.h"
#include "kernels/error.h"
#include "output.h"
#include "sampling_options.h"
#include "speculative_options.h"
#include "text_file.h"
#include "token_list.h"

namespace kvx::cli {
namespace {

struct GenerateOptions {
    RunOptions run;
    std::string prompt;
    std::string prompt_file;
    std::string tokens;  // comma-separated ids, instead of a prompt
    int n_new = 256;
    bool print_ids = false;
    bool ignore_eos = false;
    bool verbose = false;
    SamplingFlags sampling;
    BeamFlags beam;
    SpeculativeFlags speculative;
};

// A model with sliding-window layers: what each layer group's pool holds at the end of the generation (the
// windowed group stays bounded by its window however long the sequence grows).
void print_group_usage(const GenerationStats& s, const KvCacheGroups& groups) {
    if (s.kv_groups.size() < 2) return;
    std::fprintf(stderr, "kvx: KV cache by layer group:");
    for (size_t g = 0; g < s.kv_groups.size(); ++g) {
        const LayerGroupSpec& spec = groups.spec(g);
        const KvCacheUsage& u = s.kv_groups[g];
        std::fprintf(stderr, "%s %s layers (%zu): %d of %d blocks, %zu bytes", g ? ";" : "",
                     spec.window ? "windowed" : "full", spec.layers.size(), u.blocks_in_use, u.blocks_total,
                     u.bytes_in_use());
        if (spec.window) std::fprintf(stderr, " (bounded by W = %d)", spec.window);
    }
    std::fputc('\n', stderr);
}

void print_stats(const GenerationStats& s, uint64_t seed) {
    auto per_second = [](double count, double seconds) { return seconds > 0 ? count / seconds : 0.0; };
    std::fprintf(stderr, "\nkvx: prompt %d tokens, prefill %.3f ms (%.1f tokens/s)\n", s.prompt_tokens,
                 s.prefill_seconds * 1e3, per_second(s.prompt_tokens, s.prefill_seconds));
    std::fprintf(stderr, "kvx: generated %d tokens, %d decode steps in %.3f ms (%.1f tokens/s)\n", s.generated_tokens,
                 s.decode_steps, s.decode_seconds * 1e3, decode_tokens_per_second(s));
    print_speculative_stats(s);
    print_cache_usage(s.kv_usage);
    std::fprintf(stderr, "kvx: seed %llu\n", static_cast<unsigned long long>(seed));
}

void run_generate(const GenerateOptions& o, const CLI::App& cmd) {
    const bool beams = beam_search_requested(cmd, o.beam, o.sampling);
    const SamplerOptions sampling = resolve_sampling(o.sampling);
    Sampler sampler(sampling);  // validates the sampling flags before the model loads
    GenerationOptions generation;
    apply_speculative_flags(o.speculative, generation);  // so do these
    if (beams && generation.speculative_drafts > 0)
        throw Error("--speculative cannot be combined with --beams: beam search scores every beam's next token, "
                    "there is no single continuation to draft");
    if (beams && o.ignore_eos)
        throw Error("--ignore-eos cannot be combined with --beams: a beam is finished by its stop token");

    // The engine starts once the prompt is known: beam search sizes its pool by it.
    LoadedModel loaded = load_model_for_run(o.run);
    const ModelConfig& config = loaded.model->config;
    // Read once the model is known: no prompt longer than its context could hold is read to the end.
    const std::string prompt = o.prompt_file.empty()
                                   ? o.prompt
                                   : read_text_file(o.prompt_file, "prompt file",
                                                    max_prompt_bytes(o.run.context > 0 ? o.run.context : config.max_seq_len));
    const bool ids_only = !o.tokens.empty() && (config.tokenizer_type.empty() || o.print_ids);
    const auto tokenizer = ids_only ? token_id_text() : load_tokenizer(loaded.model->dir, config);
    std::vector<int32_t> tokens =
        o.tokens.empty() ? tokenizer->encode(prompt, /*add_bos=*/true) : parse_token_list(o.tokens);
    // A tokenizer that puts nothing before a text (GPT-2's) gives an empty prompt no tokens; the model's
    // BOS, where it has one, is what such models start from (HF's generate does the same).
    if (tokens.empty() && config.bos_token_id >= 0) tokens.push_back(config.bos_token_id);
    for (int32_t token : tokens)  // before the tokenizer prints them
        if (token >= config.vocab_size)
            throw Error("token id " + std::to_string(token) + " is outside the vocabulary of " +
                        std::to_string(config.vocab_size));

    if (beams) return run_beam_generate(loaded, o.run, *tokenizer, tokens, o.n_new, o.beam, o.verbose);
    start_engine(loaded, o.run);
    if (o.verbose) log_cache_events(*loaded.engine);

    generation.max_new_tokens = o.n_new;
    if (!o.ignore_eos) generation.stop_token_ids = config.eos_token_ids;
    const GenerationStats stats = generate(*loaded.engine, *tokenizer, sampler, tokens, generation, write_out);
    write_out("\n");
    print_stats(stats, sampling.seed);
    print_weight_format(*loaded.model);
    print_group_usage(stats, loaded.engine->cache_groups());
    print_peak_rss();
}

}  // namespace

void add_generate_command(CLI::App& app) {
    auto o = std::make_shared<GenerateOptions>();
    CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt, streamed to stdout");
    add_run_options(*cmd, o->run);
    auto* prompt = cmd->add_option("-p,--prompt", o->prompt, "Prompt text (default: empty, the model starts from BOS)");
    auto* file = cmd->add_option("-f,--file", o->prompt_file, "Read the prompt from this file")->excludes(prompt);
    auto* tokens = cmd->add_option("--tokens", o->tokens,
                    "Prompt as comma-separated token ids, e.g. 1,403,407; a model without a tokenizer then "
                    "prints token ids")
        ->excludes(prompt)
        ->excludes(file);
    cmd->add_flag("--print-ids", o->print_ids, "Print token ids instead of text, as for a model without a tokenizer")
        ->needs(tokens);
    cmd->add_flag("--ignore-eos", o->ignore_eos,
                  "Do not stop at the model's stop tokens: generate exactly --n-new tokens (for speed measurements)");
    cmd->add_option("-n,--n-new", o->n_new, "New tokens to generate; -1 = until a stop token or the context is full")
        ->capture_default_str();
    add_sampling_options(*cmd, o->sampling);
    cmd->add_flag("--verbose", o->verbose, "Print every KV cache operation as it happens (stderr)");
    add_speculative_options(*cmd, o->speculative);
    add_beam_options(*cmd, o->beam);
    cmd->callback([o, cmd] { run_generate(*o, *cmd); });
}

}  // namespace kvx::cli
