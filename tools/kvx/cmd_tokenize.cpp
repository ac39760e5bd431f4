// kvx tokenize: the token ids of a text, comma-separated on stdout, so that kvx's tokenizer can be
// compared with any other.
#include <cstdio>

#include "backend_choice.h"
#include "commands.h"
#include "engine/model.h"
#include "engine/tokenizer.h"

namespace kvx::cli {
namespace {

struct TokenizeOptions {
    std::string model_dir;
    std::string text;
    bool no_bos = false;
};

void run_tokenize(const TokenizeOptions& o) {
    const std::string dir = resolve_model_dir(o.model_dir);
    const ModelConfig config = load_model_config(dir);
    const auto tokens = load_tokenizer(dir, config)->encode(o.text, !o.no_bos);
    for (size_t i = 0; i < tokens.size(); ++i) std::printf(i ? ",%d" : "%d", tokens[i]);
    std::printf("\n");
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
    auto o = std::make_shared<TokenizeOptions>();
    CLI::App* cmd = app.add_subcommand("tokenize", "Print the token ids of a text, comma-separated");
    cmd->add_option("-m,--model", o->model_dir, "Model directory (default: the built-in stories260K)");
    cmd->add_option("-p,--prompt", o->text, "Text to tokenize")->required();
    cmd->add_flag("--no-bos", o->no_bos, "Do not prepend the BOS token");
    cmd->callback([o] { run_tokenize(*o); });
}

}  // namespace kvx::cli
