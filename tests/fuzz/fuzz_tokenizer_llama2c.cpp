// llama2.c's tokenizer.bin (engine/tokenizer/tokenizer_llama2c*.cpp): the file's lengths and pieces, and
// encoding and decoding with whatever vocabulary it holds. The input is split into the vocabulary size and
// BOS id the model would give, a text, and the file.
#include <fuzzer/FuzzedDataProvider.h>

#include "engine/tokenizer/tokenizer_llama2c.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace kvx;
    FuzzedDataProvider input(data, size);
    const int vocab_size = input.ConsumeIntegralInRange<int>(1, 1024);
    const int bos = input.ConsumeIntegralInRange<int>(-1, vocab_size - 1);
    const bool add_bos = input.ConsumeBool();
    const std::string text = input.ConsumeRandomLengthString(2048);
    const std::string path = fuzz::scratch_file("tokenizer.bin", input.ConsumeRemainingBytesAsString());
    fuzz::accepted_or_refused([&] {
        const Llama2cTokenizer tokenizer(path, vocab_size, bos);
        int32_t prev = -1;
        for (int32_t id : tokenizer.encode(text, add_bos)) {
            tokenizer.decode(prev, id);
            prev = id;
        }
    });
    return 0;
}
