// kvx generate: text in, text out, streamed, with prefill and decode speed on stderr at the end.
#include <cstdio>
#include <random>

#include "backend_choice.h"
#include "commands.h"
#include "engine/error.h"
#include "engine/generator.h"
#include "engine/tokenizer.h"
#include "text_file.h"

namespace kvx::cli {
namespace {

struct GenerateOptions {
    RunOptions run;
    std::string prompt;
    std::string prompt_file;
    int n_new = 256;
    SamplerOptions sampling;
    int64_t seed = -1;
};

void print_stats(const GenerationStats& s, uint64_t seed, int32_t block_size) {
    auto per_second = [](double count, double seconds) { return seconds > 0 ? count / seconds : 0.0; };
    std::fprintf(stderr, "\nkvx: prompt %d tokens, prefill %.3f ms (%.1f tokens/s)\n", s.prompt_tokens,
                 s.prefill_seconds * 1e3, per_second(s.prompt_tokens, s.prefill_seconds));
    std::fprintf(stderr, "kvx: generated %d tokens, %d decode steps in %.3f ms (%.1f tokens/s)\n", s.generated_tokens,
                 s.decode_steps, s.decode_seconds * 1e3, per_second(s.decode_steps, s.decode_seconds));
    std::fprintf(stderr, "kvx: KV cache %d of %d blocks of %d tokens, %zu of %zu bytes; seed %llu\n", s.kv_blocks_used,
                 s.kv_blocks_total, block_size, s.kv_bytes_used, s.kv_bytes_total,
                 static_cast<unsigned long long>(seed));
}

void run_generate(const GenerateOptions& o) {
    std::string prompt = o.prompt_file.empty() ? o.prompt : read_text_file(o.prompt_file, "prompt file");
    SamplerOptions sampling = o.sampling;
    sampling.seed = o.seed >= 0 ? static_cast<uint64_t>(o.seed) : std::random_device{}();
    Sampler sampler(sampling);  // validates the sampling flags before the model loads

    LoadedModel loaded = load_for_run(o.run);
    const ModelConfig& config = loaded.model->config;
    const auto tokenizer = load_tokenizer(loaded.model->dir, config);
    std::vector<int32_t> tokens = tokenizer->encode(prompt, /*add_bos=*/true);
    // A tokenizer that puts nothing before a text (GPT-2's) gives an empty prompt no tokens; the model's
    // BOS, where it has one, is what such models start from (HF's generate does the same).
    if (tokens.empty() && config.bos_token_id >= 0) tokens.push_back(config.bos_token_id);

    GenerationOptions generation;
    generation.max_new_tokens = o.n_new;
    generation.stop_token_ids = config.eos_token_ids;
    const GenerationStats stats = generate(*loaded.engine, *tokenizer, sampler, tokens, generation, [](std::string_view text) {
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
    });
    std::fputc('\n', stdout);
    std::fflush(stdout);
    print_stats(stats, sampling.seed, loaded.engine->cache().block_size());
}

}  // namespace

void add_generate_command(CLI::App& app) {
    auto o = std::make_shared<GenerateOptions>();
    CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt, streamed to stdout");
    add_run_options(*cmd, o->run);
    auto* prompt = cmd->add_option("-p,--prompt", o->prompt, "Prompt text (default: empty, the model starts from BOS)");
    cmd->add_option("-f,--file", o->prompt_file, "Read the prompt from this file")->excludes(prompt);
    cmd->add_option("-n,--n-new", o->n_new, "New tokens to generate; -1 = until a stop token or the context is full")
        ->capture_default_str();
    cmd->add_option("--temp", o->sampling.temperature, "Sampling temperature; 0 = greedy")->capture_default_str();
    cmd->add_option("--top-k", o->sampling.top_k, "Keep the k most likely tokens; 0 = all")->capture_default_str();
    cmd->add_option("--top-p", o->sampling.top_p, "Keep the smallest set of tokens with this much probability; 1 = all")
        ->capture_default_str();
    cmd->add_option("-s,--seed", o->seed, "Random seed; -1 = a random one (printed at the end)")->capture_default_str();
    cmd->callback([o] { run_generate(*o); });
}

}  // namespace kvx::cli
