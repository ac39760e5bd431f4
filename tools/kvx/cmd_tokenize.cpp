// kvx tokenize: the token ids of a text, comma-separated on stdout, so that kvx's tokenizer can be
// compared with any other; or, with --ids, the text that ids decode to. -m takes a model directory or a GGUF
// file (gguf_model.h's is_gguf_file), whose tokenizer is read from its metadata without loading the model.
#include <chrono>
#include <cstdio>
#include <sstream>

#include "backend_choice.h"
#include "commands.h"
#include "engine/files/gguf_file.h"
#include "engine/generation/load_tokenizer.h"
#include "engine/model/gguf_model.h"
#include "engine/model/model.h"
#include "engine/tokenizer/gguf_tokenizer.h"
#include "kernels/error.h"
#include "output.h"
#include "text_file.h"

namespace kvx::cli {
namespace {

// tokenize has no context to bound its text by; this is ample for measuring a tokenizer's speed.
constexpr size_t kMaxTextFileBytes = size_t{256} << 20;

struct TokenizeOptions {
    std::string model_dir;
    std::string text;
    std::string text_file;
    std::string ids;  // "1,2,3": decode instead of encode
    bool no_bos = false;
    bool stats = false;
};

// "12, 7,3" -> {12, 7, 3}; every id must be a row of the model's vocabulary.
std::vector<int32_t> parse_ids(const std::string& list, int vocab_size) {
    std::vector<int32_t> ids;
    std::istringstream in(list);
    for (std::string item; std::getline(in, item, ',');) {
        const size_t first = item.find_first_not_of(" \t"), last = item.find_last_not_of(" \t");
        const std::string id = first == std::string::npos ? "" : item.substr(first, last - first + 1);
        size_t used = 0;
        long value = -1;
        try {
            value = std::stol(id, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (id.empty() || used != id.size()) throw Error("--ids: '" + id + "' is not a token id");
        if (value < 0 || value >= vocab_size)
            throw Error("--ids: token id " + id + " is outside the model's vocabulary of " + std::to_string(vocab_size));
        ids.push_back(static_cast<int32_t>(value));
    }
    return ids;
}

struct LoadedTokenizer {
    std::unique_ptr<Tokenizer> tokenizer;
    int vocab_size = 0;
};

LoadedTokenizer load(const std::string& model) {
    if (is_gguf_file(model)) {
        GgufTokenizer gguf = load_gguf_tokenizer(GgufFile(model));
        return {std::move(gguf.tokenizer), gguf.n_tokens};
    }
    const std::string dir = resolve_model_dir(model);
    const ModelConfig config = load_model_config(dir);
    return {load_tokenizer(dir, config), config.vocab_size};
}

void run_tokenize(const TokenizeOptions& o) {
    const auto [tokenizer, vocab_size] = load(o.model_dir);
    if (!o.ids.empty()) {
        std::string text;
        int32_t prev = -1;
        for (int32_t id : parse_ids(o.ids, vocab_size)) {
            text += tokenizer->decode(prev, id);
            prev = id;
        }
        write_out(text + "\n");
        return;
    }
    const std::string text = o.text_file.empty() ? o.text : read_text_file(o.text_file, "text file", kMaxTextFileBytes);
    const auto start = std::chrono::steady_clock::now();
    const auto tokens = tokenizer->encode(text, !o.no_bos);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::string ids;
    for (size_t i = 0; i < tokens.size(); ++i) ids += (i ? "," : "") + std::to_string(tokens[i]);
    write_out(ids + "\n");
    if (o.stats)
        std::fprintf(stderr, "kvx: %zu tokens from %zu bytes in %.3f ms (%.2f MB/s)\n", tokens.size(), text.size(),
                     seconds * 1e3, seconds > 0 ? static_cast<double>(text.size()) / seconds / 1e6 : 0.0);
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
    auto o = std::make_shared<TokenizeOptions>();
    CLI::App* cmd = app.add_subcommand("tokenize", "Print the token ids of a text, comma-separated, or decode ids");
    cmd->add_option("-m,--model", o->model_dir, "Model directory or GGUF file (default: the built-in stories260K)");
    auto* prompt = cmd->add_option("-p,--prompt", o->text, "Text to tokenize");
    auto* file = cmd->add_option("-f,--file", o->text_file, "Read the text to tokenize from this file")->excludes(prompt);
    auto* ids = cmd->add_option("--ids", o->ids, "Comma-separated token ids to decode into text instead")
                    ->excludes(prompt)
                    ->excludes(file);
    cmd->add_flag("--no-bos", o->no_bos, "Do not prepend the BOS token");
    cmd->add_flag("--stats", o->stats, "Print the token count and the encoding speed on stderr");
    cmd->callback([o, prompt, file, ids] {
        if (prompt->count() + file->count() + ids->count() == 0)
            throw CLI::RequiredError("one of --prompt, --file or --ids");
        run_tokenize(*o);
    });
}

}  // namespace kvx::cli
