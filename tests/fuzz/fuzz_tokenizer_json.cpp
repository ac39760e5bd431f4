// HF tokenizer.json (engine/tokenizer/bpe_hf_json.cpp and the BPE tokenizer it builds): JSON depth, every
// component's fields, ids, merges, added tokens, pre-tokenizer regexes; then a fixed text encoded, as plain
// text too, and decoded.
#include "engine/tokenizer/bpe_spec.h"
#include "engine/tokenizer/tokenizer_bpe.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace kvx;
    const std::string path = fuzz::scratch_file("tokenizer.json", fuzz::as_text(data, size));
    fuzz::accepted_or_refused([&] {
        const BpeTokenizer tokenizer(read_hf_tokenizer_json(path));
        for (std::string_view text : {"Hello, world! 123 <|endoftext|>", "  caf\xc3\xa9\n\tx<|im_end|>", ""}) {
            for (int32_t id : tokenizer.encode(text, true)) tokenizer.decode(-1, id);
            for (int32_t id : tokenizer.encode_text(text)) tokenizer.decode(-1, id);
        }
    });
    return 0;
}
