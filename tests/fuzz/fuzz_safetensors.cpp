// The safetensors reader (engine/model/safetensors.cpp): its 8-byte header length, JSON header, dtypes,
// shapes and offsets. Every tensor it hands out is read end to end: a view outside the mapping would fault.
#include "engine/model/safetensors.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace kvx;
    const std::string path = fuzz::scratch_file("model.safetensors", fuzz::as_text(data, size));
    fuzz::accepted_or_refused([&] {
        const SafetensorsFile file(path);
        unsigned sum = 0;
        for (const auto& [name, view] : file.tensors()) {
            for (size_t i = 0; i < view.nbytes; ++i) sum += view.data[i];
            if (view.dtype == "F32") file.f32(name, view.shape);
            if (view.dtype == "F16") file.f16(name, view.shape);
        }
        volatile unsigned keep = sum;
        (void)keep;
    });
    return 0;
}
