// The kvx subcommands. Each registers its flags and its action on the top-level CLI11 app.
#pragma once

#include <CLI/CLI.hpp>

namespace kvx::cli {

void add_generate_command(CLI::App& app);
void add_chat_command(CLI::App& app);
void add_logits_command(CLI::App& app);
void add_convert_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_perplexity_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_inspect_command(CLI::App& app);

}  // namespace kvx::cli
