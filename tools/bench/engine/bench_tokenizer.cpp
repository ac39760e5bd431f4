// Benchmark of Llama2cTokenizer::encode on tok512.bin (stories260K's tokenizer): story text (the golden
// output of llama2.c's run.c, repeated) of 10 KB and 1 MB, in bytes of text per second. The merge was
// quadratic once (1 MB did not finish in minutes); a rate that falls far from 10 KB to 1 MB says it is again.
#include <fstream>
#include <iterator>
#include <string>

#include "engine/tokenizer/tokenizer_llama2c.h"
#include "kernels/error.h"
#include "tools/bench/support/bench_support.h"

namespace kvx::bench {
namespace {

const std::string kStories = std::string(KVX_SOURCE_DIR) + "/testdata/models/stories260K";

// `bytes` bytes of the story, repeated and cut; empty when the file cannot be read.
std::string story_text(size_t bytes) {
    std::ifstream in(kStories + "/golden_greedy_n256_runc.txt", std::ios::binary);
    const std::string golden((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::string text;
    while (!golden.empty() && text.size() < bytes) text += golden;
    text.resize(golden.empty() ? 0 : bytes);
    return text;
}

// Arguments: threads (1: encode is single-threaded), bytes of text.
void tokenizer_encode(benchmark::State& state) {
    const auto bytes = static_cast<size_t>(state.range(1));
    const std::string text = story_text(bytes);  // [bytes]
    if (text.empty()) return state.SkipWithError(("cannot read the story text in " + kStories).c_str());
    try {
        static const Llama2cTokenizer tokenizer(kStories + "/tok512.bin", 512, 1);
        size_t tokens = 0;
        for (auto _ : state) {
            const auto ids = tokenizer.encode(text, true);
            tokens = ids.size();
            benchmark::DoNotOptimize(ids.data());
        }
        state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
        state.counters["tokens"] = static_cast<double>(tokens);
    } catch (const Error& e) {
        state.SkipWithError(e.what());
    }
}

BENCHMARK(tokenizer_encode)->Apply([](benchmark::internal::Benchmark* b) {
    b->ArgNames({"threads", "bytes"});
    b->ArgsProduct({{1}, {10 * 1024, 1024 * 1024}});
    b->UseRealTime();
    b->Unit(benchmark::kMillisecond);
});

}  // namespace
}  // namespace kvx::bench
