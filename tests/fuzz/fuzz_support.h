// What the fuzz targets share. Each feeds its input to one of kvx's readers the way kvx does (through a
// file, since the loaders take paths) and holds it to one rule: the input is accepted, or refused with a
// kvx::Error. Anything else is a finding: another exception (libFuzzer reports it as a crash), a crash, an
// ASan or UBSan report, or an allocation beyond -malloc_limit_mb (a size trusted before it was checked).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "engine/model/model_config.h"
#include "engine/runtime/backend.h"
#include "engine/tokenizer/tokenizer_bpe.h"
#include "kernels/error.h"

namespace kvx::fuzz {

// A folder of this process's own, in memory where the system has one (/dev/shm), removed at exit.
const std::string& scratch_dir();

// Writes `bytes` to scratch_dir()/name and returns the path.
std::string scratch_file(const std::string& name, std::string_view bytes);

inline std::string_view as_text(const uint8_t* data, size_t size) {
    return {reinterpret_cast<const char*>(data), size};
}

// Runs f, letting only kvx::Error pass: the one way a reader may refuse. With KVX_FUZZ_VERBOSE set, says
// which (to check that the seeds are accepted: run a target on a corpus folder's files).
template <class F>
void accepted_or_refused(F f) {
    try {
        f();
        if (std::getenv("KVX_FUZZ_VERBOSE")) std::fprintf(stderr, "kvx fuzz: accepted\n");
    } catch (const Error& e) {
        if (std::getenv("KVX_FUZZ_VERBOSE")) std::fprintf(stderr, "kvx fuzz: refused: %s\n", e.what());
    }
}

// A model for the targets that run an engine without weights: GPT-2's tokenizer with ChatML's markers as
// special tokens, a config of one tiny layer with the chatml template and a context of 256, and a backend
// that computes nothing and always favours token 11 (","): answers of a few tokens, no work.
constexpr int32_t kImStart = 50257, kImEnd = 50258, kVocab = 50259;
const BpeTokenizer& chatml_gpt2();
ModelConfig chatml_config();

class CommaBackend final : public Backend {
public:
    std::string name() const override { return "comma"; }
    void allocate_kv(const DecoderPlan&) override {}
    void copy_blocks(std::span<const std::vector<BlockCopy>>) override {}
    void forward(const ForwardBatch& batch, float* logits) override;
};

}  // namespace kvx::fuzz
