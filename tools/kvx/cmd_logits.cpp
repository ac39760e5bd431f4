// kvx logits: the logits of every position of a token sequence, as a .npy file, so that kvx can be compared
// with any reference. The first --n-prefill tokens go through one prefill pass, the rest through one decode
// step each, exactly as generation would compute them.
#include <cstdio>

#include "backend_choice.h"
#include "commands.h"
#include "engine/files/npy.h"
#include "engine/generation/load_tokenizer.h"
#include "engine/generation/position_logits.h"
#include "kernels/error.h"
#include "token_list.h"

namespace kvx::cli {
namespace {

struct LogitsOptions {
    RunOptions run;
    std::string tokens;
    std::string prompt;
    std::string output;
    int n_prefill = 0;
};

void run_logits(const LogitsOptions& o) {
    LoadedModel loaded = load_for_run(o.run);
    const ModelConfig& config = loaded.model->config;
    std::vector<int32_t> tokens;
    if (!o.tokens.empty()) tokens = parse_token_list(o.tokens);
    else tokens = load_tokenizer(loaded.model->dir, config)->encode(o.prompt, /*add_bos=*/true);
    if (tokens.empty()) throw Error("no tokens to run (give --tokens or a non-empty --prompt)");
    const size_t n_prefill = o.n_prefill > 0 ? static_cast<size_t>(o.n_prefill) : tokens.size();
    if (n_prefill > tokens.size())
        throw Error("--n-prefill " + std::to_string(n_prefill) + " exceeds the " + std::to_string(tokens.size()) +
                    " tokens given");

    const std::vector<float> all = position_logits(*loaded.engine, tokens, n_prefill);
    const size_t vocab = static_cast<size_t>(config.vocab_size);
    write_npy_f32(o.output, all, {static_cast<int64_t>(tokens.size()), static_cast<int64_t>(vocab)});
    std::fprintf(stderr, "kvx: wrote logits [%zu, %zu] to %s\n", tokens.size(), vocab, o.output.c_str());
    print_peak_rss();
}

}  // namespace

void add_logits_command(CLI::App& app) {
    auto o = std::make_shared<LogitsOptions>();
    CLI::App* cmd = app.add_subcommand("logits", "Write the logits of every position of a token sequence to a .npy file");
    add_run_options(*cmd, o->run);
    auto* tokens = cmd->add_option("--tokens", o->tokens, "Comma-separated token ids, e.g. 1,403,407");
    cmd->add_option("-p,--prompt", o->prompt, "Text to tokenize (with BOS) instead of --tokens")->excludes(tokens);
    cmd->add_option("-o,--output", o->output, "Output .npy file: float32 [tokens, vocab]")->required();
    cmd->add_option("--n-prefill", o->n_prefill,
                    "Tokens run in the first (prefill) pass; the rest run one decode step each (default: all)")
        ->check(CLI::NonNegativeNumber);
    cmd->callback([o] { run_logits(*o); });
}

}  // namespace kvx::cli
