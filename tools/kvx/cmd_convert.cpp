// kvx convert: ONNX file -> kvx model directory. The converter is a Python program (the package kvx_tools,
// tools/kvx_tools/convert/), as in llama.cpp and calm, since reading ONNX graphs is what the onnx package is
// for; this command runs `$KVX_PYTHON -m kvx_tools.convert` (python3 by default), with the copy of the
// package kvx ships in its data folder (data_dir.h) first on PYTHONPATH, else the Python's own installed one.
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sys/wait.h>
#include <unistd.h>

#include "commands.h"
#include "data_dir.h"
#include "kernels/error.h"

namespace kvx::cli {
namespace {

struct ConvertOptions {
    std::string onnx_path;
    std::string output_dir;
    std::string tokenizer;
    std::string merges;
    std::string chat_template;
    int max_seq_len = 0;
    std::string dtype;  // "f16", "f32", or empty: the graph's own
    bool check_weights = true;  // refuse weights holding NaN or infinity
    std::string quantize;  // "int8", "int4", or empty: keep float matrices float
    int block_size = 0;    // 0: the converter's default
    bool symmetric = false;
    bool quantize_embeddings = true;
};

std::string env_or(const char* name, const char* fallback) {
    const char* value = std::getenv(name);
    return value && *value ? value : fallback;
}

// The converter's environment: kvx's own, with <data>/python first on PYTHONPATH where kvx shipped its
// package there, so that the converter is the one of this kvx whatever copy the Python has installed.
std::vector<std::string> converter_environment() {
    const std::filesystem::path shipped = data_dir() / "python";
    std::string pythonpath = std::filesystem::exists(shipped / "kvx_tools") ? shipped.string() : "";
    if (const char* inherited = std::getenv("PYTHONPATH"); inherited && *inherited)
        pythonpath += (pythonpath.empty() ? "" : ":") + std::string(inherited);
    std::vector<std::string> env;
    for (char** entry = environ; *entry; ++entry)
        if (std::strncmp(*entry, "PYTHONPATH=", 11) != 0) env.emplace_back(*entry);
    if (!pythonpath.empty()) env.push_back("PYTHONPATH=" + pythonpath);
    return env;
}

std::vector<char*> pointers_to(std::vector<std::string>& strings) {
    std::vector<char*> pointers;
    for (std::string& s : strings) pointers.push_back(s.data());
    pointers.push_back(nullptr);
    return pointers;
}

int run_convert(const ConvertOptions& o) {
    const std::string python = env_or("KVX_PYTHON", "python3");
    std::vector<std::string> args = {python, "-m", "kvx_tools.convert", o.onnx_path, "-o", o.output_dir};
    if (!o.tokenizer.empty()) args.insert(args.end(), {"--tokenizer", o.tokenizer});
    if (!o.merges.empty()) args.insert(args.end(), {"--merges", o.merges});
    if (!o.chat_template.empty()) args.insert(args.end(), {"--chat-template", o.chat_template});
    if (o.max_seq_len > 0) args.insert(args.end(), {"--max-seq-len", std::to_string(o.max_seq_len)});
    if (!o.dtype.empty()) args.insert(args.end(), {"--dtype", o.dtype});
    args.push_back(o.check_weights ? "--check-weights" : "--no-check-weights");
    if (!o.quantize.empty()) args.insert(args.end(), {"--quantize", o.quantize});
    if (o.block_size > 0) args.insert(args.end(), {"--block-size", std::to_string(o.block_size)});
    if (o.symmetric) args.push_back("--symmetric");
    args.push_back(o.quantize_embeddings ? "--quantize-embeddings" : "--no-quantize-embeddings");

    // Everything the child needs is built before fork: kvx may run OpenMP threads, and the child of a threaded
    // process must not allocate before exec.
    std::vector<std::string> env = converter_environment();
    const std::vector<char*> argv = pointers_to(args), envp = pointers_to(env);
    const pid_t pid = fork();
    if (pid < 0) throw Error("cannot start the converter");
    if (pid == 0) {
        execvpe(argv[0], argv.data(), envp.data());
        std::fprintf(stderr, "kvx convert: cannot run '%s' (set KVX_PYTHON to a Python with onnx installed)\n", argv[0]);
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) throw Error("lost the converter process");
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

}  // namespace

void add_convert_command(CLI::App& app) {
    auto o = std::make_shared<ConvertOptions>();
    CLI::App* cmd = app.add_subcommand("convert", "Convert an ONNX model into a kvx model directory");
    cmd->add_option("model", o->onnx_path, "ONNX file (external data beside it is found)")->required();
    cmd->add_option("-o,--output", o->output_dir, "Model directory to write")->required();
    cmd->add_option("--tokenizer", o->tokenizer,
                    "Tokenizer file to bundle: llama2.c tokenizer.bin, HF tokenizer.json or GPT-2 encoder.json");
    cmd->add_option("--merges", o->merges, "GPT-2's vocab.bpe, with --tokenizer encoder.json");
    cmd->add_option("--chat-template", o->chat_template, "Jinja chat template file to bundle");
    cmd->add_option("--max-seq-len", o->max_seq_len,
                    "Context length of the model, when the ONNX file's metadata does not give it")
        ->check(CLI::PositiveNumber);
    cmd->add_option("--dtype", o->dtype,
                    "Storage of the weight matrices: f16 or f32 (default: the ONNX graph's, f16 when all its "
                    "matrices are fp16, else f32)")
        ->check(CLI::IsMember({"f16", "f32"}));
    cmd->add_flag("--check-weights,!--no-check-weights", o->check_weights,
                  "Refuse weights that hold NaN or infinity (default: on; --no-check-weights keeps them)");
    cmd->add_option("--quantize", o->quantize,
                    "Quantize the float weight matrices round-to-nearest as ONNX Runtime's MatMulNBitsQuantizer "
                    "does: int8 or int4 (default: keep them float)")
        ->check(CLI::IsMember({"int8", "int4"}));
    cmd->add_option("--block-size", o->block_size, "With --quantize: inputs per block (16 to 256; default 32)")
        ->check(CLI::IsMember({16, 32, 64, 128, 256}));
    cmd->add_flag("--symmetric", o->symmetric, "With --quantize: no zero points (default: a zero point per block)");
    cmd->add_flag("--quantize-embeddings,!--no-quantize-embeddings", o->quantize_embeddings,
                  "With --quantize: the token embedding and classifier too, as llama.cpp does (default: on)");
    cmd->callback([o] {
        const int code = run_convert(*o);
        if (code != 0) std::exit(code);  // the converter has already said what went wrong
    });
}

}  // namespace kvx::cli
