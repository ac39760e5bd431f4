// kvx chat: an interactive conversation with an instruct model. One line of input is one user message
// (typed, or piped for scripts and tests); the answer streams to stdout. The conversation's KV cache lives
// for the whole session, so each turn prefills only its own new tokens; the stats on stderr show it.
//
// Ctrl-C stops the current answer and returns to the prompt; a second Ctrl-C (or one at the prompt), or the
// end of input, ends the session with its stats.
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>

#include "backend_choice.h"
#include "cache_report.h"
#include "commands.h"
#include "engine/generation/chat_session.h"
#include "engine/generation/load_tokenizer.h"
#include "engine/model/chat_format.h"
#include "engine/model/chat_format_markers.h"
#include "kernels/error.h"
#include "output.h"
#include "sampling_options.h"
#include "speculative_options.h"
#include "text_file.h"

namespace kvx::cli {
namespace {

struct ChatOptions {
    RunOptions run;
    SamplingFlags sampling;
    SpeculativeFlags speculative;
    int n_new = -1;
    std::string system;
    bool system_given = false;
    bool verbose = false;
    bool parse_special = false;
    std::string chat_template;  // --chat-template: a format name or a Jinja file, in place of the model's own
};

// The chat format --chat-template gives: a format kvx applies, by name, or a Jinja template file recognised as
// one (engine/model/chat_format_markers.h); a file kvx cannot place is refused with the reason.
ChatConfig chat_config_from_option(const std::string& value, const ModelConfig& config) {
    ChatConfig chat;
    chat.template_file = value;
    if (const ChatFormat* format = find_chat_format(value)) {
        chat.format = value;
        chat.add_bos = format->template_writes_bos && config.bos_token_id >= 0;
        return chat;
    }
    constexpr size_t kMaxTemplateBytes = size_t{1} << 20;
    chat = recognise_chat_template(read_text_file(value, "chat template", kMaxTemplateBytes));
    chat.template_file = value;
    if (chat.format.empty())
        throw Error("--chat-template '" + value + "': " + chat.unsupported_reason + "; name a format instead (" +
                    std::string(chat_format_names()) + ")");
    return chat;
}

std::atomic<int> g_interrupts{0};  // Ctrl-C presses; lock-free, so the signal handler may touch it

extern "C" void count_interrupt(int) { g_interrupts.fetch_add(1, std::memory_order_relaxed); }

// No SA_RESTART: a Ctrl-C while waiting for input makes the read fail, which ends the session.
void install_interrupt_handler() {
    struct sigaction action {};
    action.sa_handler = count_interrupt;
    sigemptyset(&action.sa_mask);
    action.sa_flags = 0;
    sigaction(SIGINT, &action, nullptr);
}

struct SessionTotals {
    int32_t prefilled = 0;
    int32_t generated = 0;
    double prefill_seconds = 0;
    double decode_seconds = 0;
    int32_t decode_tokens = 0;  // sampled from the decode passes' logits
};

double per_second(double count, double seconds) { return seconds > 0 ? count / seconds : 0.0; }

void print_turn_stats(int turn, const GenerationStats& s) {
    std::fprintf(stderr, "kvx: turn %d: prefill %d new tokens in %.3f ms (%.1f tokens/s), %d already in the cache "
                         "not recomputed\n",
                 turn, s.prompt_tokens, s.prefill_seconds * 1e3, per_second(s.prompt_tokens, s.prefill_seconds),
                 s.cached_tokens);
    std::fprintf(stderr, "kvx: turn %d: answered %d tokens, %d decode steps in %.3f ms (%.1f tokens/s)%s\n", turn,
                 s.generated_tokens, s.decode_steps, s.decode_seconds * 1e3, decode_tokens_per_second(s),
                 s.interrupted ? ", interrupted" : "");
    print_speculative_stats(s);
}

void print_session_stats(const ChatSession& chat, const Engine& engine, const SessionTotals& t, uint64_t seed) {
    std::fprintf(stderr, "kvx: chat: %d turns, conversation %d tokens of a %d-token context; prefilled %d tokens "
                         "in %.3f ms, generated %d tokens in %.3f ms (%.1f tokens/s)\n",
                 chat.turns(), chat.conversation_tokens(), engine.context(), t.prefilled, t.prefill_seconds * 1e3,
                 t.generated, t.decode_seconds * 1e3, per_second(t.decode_tokens, t.decode_seconds));
    print_cache_usage(engine.cache_usage());
    std::fprintf(stderr, "kvx: seed %llu\n", static_cast<unsigned long long>(seed));
}

void refuse_turn(int turn, const std::string& why) {
    std::fprintf(stderr, "kvx: turn %d refused: %s\n", turn, why.c_str());
}

void print_tokens(int turn, const std::vector<int32_t>& tokens) {
    std::fprintf(stderr, "kvx: turn %d tokens:", turn);
    for (int32_t t : tokens) std::fprintf(stderr, " %d", t);
    std::fputc('\n', stderr);
}

void run_chat(const ChatOptions& o) {
    const SamplerOptions sampling = resolve_sampling(o.sampling);
    Sampler sampler(sampling);  // validates the sampling flags before the model loads
    if (o.n_new < -1) throw Error("-n must be -1 (until the end of the answer) or >= 0");
    GenerationOptions speculative;
    apply_speculative_flags(o.speculative, speculative);

    LoadedModel loaded = load_for_run(o.run);
    ModelConfig config = loaded.model->config;  // with --chat-template's format in place of the model's own
    if (!o.chat_template.empty()) {
        config.chat = chat_config_from_option(o.chat_template, config);
        config.has_chat = true;
    }
    const auto tokenizer = load_tokenizer(loaded.model->dir, config);
    ChatSession chat(*loaded.engine, config, *tokenizer,
                     o.system_given ? std::optional<std::string>(o.system) : std::nullopt, o.parse_special);

    if (o.verbose) log_cache_events(*loaded.engine);
    install_interrupt_handler();
    const bool interactive = isatty(STDIN_FILENO) != 0;
    SessionTotals totals;
    const size_t max_message_bytes = max_prompt_bytes(loaded.engine->context());
    for (;;) {
        if (interactive) write_out("> ");
        const int interrupts_before = g_interrupts.load();
        bool too_long = false;
        const std::optional<std::string> read = read_line(std::cin, max_message_bytes, too_long);
        if (!read || g_interrupts.load() != interrupts_before) break;
        const std::string& line = *read;
        const int turn = chat.turns() + 1;
        if (too_long) {
            refuse_turn(turn, "the message is longer than " + std::to_string(max_message_bytes) +
                                  " bytes, more than the context could hold");
            continue;
        }
        if (line.empty()) continue;

        GenerationOptions generation;
        generation.max_new_tokens = o.n_new;
        generation.speculative_drafts = speculative.speculative_drafts;
        generation.lookup_ngram = speculative.lookup_ngram;
        generation.stop_token_ids = config.eos_token_ids;
        generation.interrupted = [interrupts_before] { return g_interrupts.load() != interrupts_before; };
        // A turn that cannot be taken (text that is not UTF-8, more tokens than the context has left) is refused
        // and the session goes on; ChatSession::reply refuses before it changes anything, so a failure after the
        // conversation grew (an output error) is not a refusal and ends the session.
        const int32_t length_before = chat.conversation_tokens();
        GenerationStats s;
        try {
            if (o.verbose) print_tokens(turn, chat.turn_tokens(line));
            s = chat.reply(line, sampler, generation, write_out);
        } catch (const Error& e) {
            if (chat.conversation_tokens() != length_before || chat.turns() != turn - 1) throw;
            refuse_turn(turn, e.what());
            continue;
        }
        write_out("\n");
        print_turn_stats(turn, s);
        totals.prefilled += s.prompt_tokens;
        totals.generated += s.generated_tokens;
        totals.prefill_seconds += s.prefill_seconds;
        totals.decode_seconds += s.decode_seconds;
        totals.decode_tokens += decode_tokens(s);
        if (g_interrupts.load() - interrupts_before >= 2) break;  // a second Ctrl-C during the answer
    }
    if (interactive) write_out("\n");
    print_session_stats(chat, *loaded.engine, totals, sampling.seed);
    print_weight_format(*loaded.model);
}

}  // namespace

void add_chat_command(CLI::App& app) {
    auto o = std::make_shared<ChatOptions>();
    CLI::App* cmd = app.add_subcommand("chat", "Chat with an instruct model; one input line per message");
    add_run_options(*cmd, o->run);
    add_sampling_options(*cmd, o->sampling);
    add_speculative_options(*cmd, o->speculative);
    cmd->add_option("-n,--n-new", o->n_new, "Most tokens per answer; -1 = until the end of the answer or the context")
        ->capture_default_str();
    cmd->add_option("--system", o->system, "System message (default: the chat template's own, if any; \"\" = none)")
        ->each([o](const std::string&) { o->system_given = true; });
    cmd->add_option("--chat-template", o->chat_template,
                    "The chat format, for a model whose file has no template or one kvx does not recognise: a format "
                    "name (chatml, gemma, ...) or a Jinja template file");
    cmd->add_flag("--verbose", o->verbose,
                  "Print the tokens each turn appends to the cache, and every cache operation (stderr)");
    cmd->add_flag("--parse-special", o->parse_special,
                  "Read special tokens typed in a message (such as <|im_end|>) as those tokens; by default a "
                  "message is plain text and cannot end its turn or start another");
    cmd->callback([o] { run_chat(*o); });
}

}  // namespace kvx::cli
