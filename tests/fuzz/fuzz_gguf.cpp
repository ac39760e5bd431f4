// The GGUF reader (engine/files/gguf_file.cpp) and the GGUF model loader behind it (engine/model/gguf_model.cpp,
// gguf_matrix.cpp): counts, lengths, value types, tensor infos and extents, then the metadata a model is read
// from and every block type moved into kvx's layout. Every tensor the reader hands out is read end to end.
#include "engine/files/gguf_file.h"
#include "engine/model/gguf_model.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace kvx;
    const std::string path = fuzz::scratch_file("model.gguf", fuzz::as_text(data, size));
    fuzz::accepted_or_refused([&] {
        const GgufFile file(path);
        unsigned sum = 0;
        for (const GgufTensor& t : file.tensors())
            for (size_t i = 0; i < t.nbytes; ++i) sum += t.data[i];
        for (const auto& [key, value] : file.metadata()) {
            if (value.type == GgufValueType::array && value.item_type == GgufValueType::string) sum += static_cast<unsigned>(file.strings(key).size());
            if (value.type == GgufValueType::array && value.item_type == GgufValueType::f32) sum += static_cast<unsigned>(file.floats(key).size());
        }
        volatile unsigned keep = sum;
        (void)keep;
    });
    fuzz::accepted_or_refused([&] {
        const Model model = load_gguf_model(path);
        volatile int keep = model.config.n_layers;
        (void)keep;
    });
    return 0;
}
