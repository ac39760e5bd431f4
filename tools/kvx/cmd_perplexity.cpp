// kvx perplexity: a model's perplexity over a text file by llama.cpp's method (engine/generation/perplexity.h),
// so that kvx and llama.cpp's llama-perplexity (or tools/kvx_tools/bench/llamacpp_perplexity.py) give figures
// that compare: the same tokens, chunks and scored positions.
#include <cstdio>

#include "backend_choice.h"
#include "commands.h"
#include "engine/generation/load_tokenizer.h"
#include "engine/generation/perplexity.h"
#include "kernels/error.h"
#include "text_file.h"

namespace kvx::cli {
namespace {

constexpr int kDefaultContext = 512;  // llama.cpp's perplexity examples use -c 512; a model's maximum is too long
constexpr size_t kMaxTextFileBytes = size_t{256} << 20;

struct PerplexityOptions {
    RunOptions run;
    std::string text_file;
};

void run_perplexity(PerplexityOptions o) {
    const std::string text = read_text_file(o.text_file, "text file", kMaxTextFileBytes);
    if (o.run.context == 0) o.run.context = kDefaultContext;  // the chunk is the engine's whole context
    LoadedModel loaded = load_for_run(o.run);
    const auto tokenizer = load_tokenizer(loaded.model->dir, loaded.model->config);
    const std::vector<int32_t> tokens = tokenizer->encode(text, /*add_bos=*/true);
    // What the tokenizer puts before any text (nothing for SmolLM2, <bos> for Gemma): llama.cpp starts every
    // chunk with the BOS token exactly where its vocabulary adds one.
    const std::vector<int32_t> prefix = tokenizer->encode("", /*add_bos=*/true);
    const int32_t bos = prefix.size() == 1 ? prefix[0] : -1;
    const auto progress = [](const PerplexityResult& r) {
        std::fprintf(stderr, "[%zu]%.4f%s", r.chunks, r.perplexity(), r.chunks % 8 == 0 ? "\n" : ",");
    };
    const PerplexityResult result = chunked_perplexity(*loaded.engine, tokens, o.run.context, bos, progress);
    std::fprintf(stderr, "\n");
    std::printf("perplexity %.6f over %zu scored tokens (%zu chunks of %d; the text has %zu tokens)\n",
                result.perplexity(), result.scored, result.chunks, o.run.context, tokens.size());
}

}  // namespace

void add_perplexity_command(CLI::App& app) {
    auto o = std::make_shared<PerplexityOptions>();
    CLI::App* cmd = app.add_subcommand("perplexity",
                                       "Perplexity over a text file, by llama.cpp's method (chunks of --context tokens, "
                                       "the second half of each scored)");
    add_run_options(*cmd, o->run);
    cmd->add_option("-f,--file", o->text_file, "Text file to score")->required();
    cmd->callback([o] { run_perplexity(*o); });
}

}  // namespace kvx::cli
