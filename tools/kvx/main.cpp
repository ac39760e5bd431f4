// kvx: the command-line front end. Every failure ends in one line on stderr and a non-zero exit.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>

#include "commands.h"

int main(int argc, char** argv) {
    CLI::App app{"kvx: a transformer inference engine over a paged KV cache"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "kvx 0.1.0");
    kvx::cli::add_generate_command(app);
    kvx::cli::add_chat_command(app);
    kvx::cli::add_logits_command(app);
    kvx::cli::add_convert_command(app);
    kvx::cli::add_tokenize_command(app);
    kvx::cli::add_perplexity_command(app);
    kvx::cli::add_serve_command(app);
    kvx::cli::add_inspect_command(app);
    const auto is_command = [&](const char* name) {
        for (const CLI::App* command : app.get_subcommands({}))
            if (command->get_name() == name) return true;
        return false;
    };
    if (argc > 1 && argv[1][0] != '-' && !is_command(argv[1])) {
        std::fprintf(stderr, "kvx: unknown command '%s' (commands: generate, chat, serve, logits, tokenize, perplexity, convert; see --help)\n",
                     argv[1]);
        return 2;
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        std::fprintf(stderr, "kvx: %s (see --help)\n", e.what());
        return e.get_exit_code();
    } catch (const std::exception& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "kvx: %s\n", e.what());
        return 1;
    }
    // What the commands wrote last (and CLI11's help) may still sit in stdio's buffers: a write that fails only
    // now is still a failure the user must hear of.
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
        std::fprintf(stderr, "kvx: cannot write to standard output: %s\n", std::strerror(errno));
        return 1;
    }
    if (std::fflush(stderr) != 0 || std::ferror(stderr)) return 1;  // nowhere left to say so
    return 0;
}
