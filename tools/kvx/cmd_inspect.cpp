// kvx inspect FILE.gguf: what a GGUF file holds, as kvx reads it: its metadata (arrays by length and first
// items) and its tensors (type, dims fastest first, bytes). With --tensor NAME -o OUT.npy, that matrix as kvx
// holds it, dequantized to fp32 [rows][cols] by the reference dequantization: what tests compare with gguf's
// own dequantization, type by type.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "engine/files/gguf_file.h"
#include "engine/files/npy.h"
#include "engine/model/gguf_matrix.h"
#include "engine/model/model.h"
#include "kernels/error.h"

namespace kvx::cli {
namespace {

struct InspectOptions {
    std::string path;
    std::string tensor;
    std::string output;
    bool row_groups = false;
};

std::string scalar_text(const GgufValue& v) {
    switch (v.type) {
        case GgufValueType::f32:
        case GgufValueType::f64:
            return std::to_string(v.real);
        case GgufValueType::boolean:
            return v.integer ? "true" : "false";
        case GgufValueType::u64:
            return v.unsigned_big ? std::to_string(static_cast<uint64_t>(v.integer)) : std::to_string(v.integer);
        case GgufValueType::string: {
            std::string text(v.text.substr(0, 60));
            for (char& ch : text)
                if (ch == '\n' || ch == '\r' || ch == '\t') ch = ' ';
            return "\"" + text + (v.text.size() > 60 ? "...\"" : "\"");
        }
        case GgufValueType::array:
            return "[" + std::string(gguf_value_type_name(v.item_type)) + " x " + std::to_string(v.count) + "]";
        default:
            return std::to_string(v.integer);
    }
}

void print_file(const GgufFile& f) {
    std::printf("GGUF version %u, alignment %zu, %zu metadata keys, %zu tensors\n", f.version(), f.alignment(),
                f.metadata().size(), f.tensors().size());
    for (const auto& [key, value] : f.metadata())
        std::printf("  %s: %s = %s\n", key.c_str(), std::string(gguf_value_type_name(value.type)).c_str(),
                    scalar_text(value).c_str());
    for (const GgufTensor& t : f.tensors()) {
        std::string dims;
        for (int64_t d : t.dims) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
        std::printf("  tensor %s %s [%s] %zu bytes\n", t.name.c_str(), std::string(ggml_type_info(t.type).name).c_str(),
                    dims.c_str(), t.nbytes);
    }
}

void write_tensor(const GgufFile& f, const std::string& name, const std::string& output, QuantLayout layout) {
    const GgufTensor* t = f.find_tensor(name);
    if (!t) throw Error("GGUF file '" + f.path() + "' has no tensor '" + name + "'");
    const int64_t cols = t->dims[0];
    const int64_t rows = t->elements() / cols;
    std::vector<OwnedBytes> chunks;
    WeightArena arena(chunks);
    const WeightMatrix m = gguf_weight_matrix(f, *t, rows, cols, nullptr, layout, arena);
    std::vector<float> values(static_cast<size_t>(rows * cols));  // [rows][cols]
    for (int64_t r = 0; r < rows; ++r) m.row_to_f32(r, values.data() + r * cols);
    write_npy_f32(output, values, {rows, cols});
}

}  // namespace

void add_inspect_command(CLI::App& app) {
    auto o = std::make_shared<InspectOptions>();
    CLI::App* cmd = app.add_subcommand("inspect", "List a GGUF file's metadata and tensors, or write one tensor as fp32 .npy");
    cmd->add_option("file", o->path, "The GGUF file")->required();
    auto* tensor = cmd->add_option("--tensor", o->tensor, "A tensor to write, as kvx holds it, dequantized to fp32 [rows][cols]");
    cmd->add_option("-o,--output", o->output, "The .npy file --tensor writes")->needs(tensor);
    cmd->add_flag("--row-groups", o->row_groups,
                  "Hold a block tensor as the SIMD kernels read it, in row groups of 8 (where its type has them), "
                  "instead of in rows")
        ->needs(tensor);
    cmd->callback([o] {
        const GgufFile file(o->path);
        if (o->tensor.empty()) return print_file(file);
        if (o->output.empty()) throw CLI::RequiredError("--output (with --tensor)");
        write_tensor(file, o->tensor, o->output, o->row_groups ? QuantLayout::row_groups : QuantLayout::rows);
    });
}

}  // namespace kvx::cli
