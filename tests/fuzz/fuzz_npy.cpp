// .npy files (engine/files/npy.cpp): reading any bytes, and writing any shape against any array (the writer
// refuses a shape that does not match what it is given); what it wrote reads back the same.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstring>
#include <vector>

#include "engine/files/npy.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace kvx;
    FuzzedDataProvider input(data, size);
    if (input.ConsumeBool()) {
        const std::string path = fuzz::scratch_file("array.npy", input.ConsumeRemainingBytesAsString());
        fuzz::accepted_or_refused([&] { read_npy(path); });
        return 0;
    }
    std::vector<int64_t> shape(input.ConsumeIntegralInRange<size_t>(0, 4));
    for (int64_t& d : shape) d = input.ConsumeIntegral<int64_t>();
    std::vector<float> values(input.ConsumeIntegralInRange<size_t>(0, 4096));
    for (float& v : values) v = input.ConsumeFloatingPoint<float>();
    const std::string path = fuzz::scratch_dir() + "/written.npy";
    fuzz::accepted_or_refused([&] {
        write_npy_f32(path, values, shape);
        const NpyArray back = read_npy(path);
        if (back.shape != shape || back.f32.size() != values.size() ||
            (!values.empty() && std::memcmp(back.f32.data(), values.data(), values.size() * sizeof(float)) != 0))
            std::abort();
    });
    return 0;
}
