// GPT-2's real tokenizer (testdata/models/gpt2-tokenizer) encoding any bytes: invalid UTF-8 must be
// refused with kvx::Error, everything else encoded, as plain text too, and decoded back to the same bytes.
#include <cstdlib>

#include "engine/tokenizer/bpe_spec.h"
#include "engine/tokenizer/tokenizer_bpe.h"
#include "fuzz_support.h"

namespace {

const kvx::BpeTokenizer& gpt2() {
    static const kvx::BpeTokenizer tokenizer(
        kvx::read_gpt2_tokenizer(KVX_TESTDATA_DIR "/models/gpt2-tokenizer/encoder.json",
                                 KVX_TESTDATA_DIR "/models/gpt2-tokenizer/vocab.bpe"));
    return tokenizer;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace kvx;
    const std::string_view text = fuzz::as_text(data, size);
    fuzz::accepted_or_refused([&] {
        std::string decoded;
        for (int32_t id : gpt2().encode_text(text)) decoded += gpt2().decode(-1, id);
        if (decoded != text) std::abort();  // byte-level BPE loses nothing
        for (int32_t id : gpt2().encode(text, true)) gpt2().decode(-1, id);
    });
    return 0;
}
