// Benchmark of KvCacheManager::rewind_to, the metadata side of a rewind (speculative decoding's rejected
// drafts, a chat turn taken back): its cost must grow with the blocks it releases, not with the sequence's
// length. Each iteration appends `released` tokens to a `context`-long sequence (untimed) and rewinds them
// (timed by hand: only the rewind_to call).
#include <chrono>
#include <numeric>
#include <vector>

#include "engine/cache/kv_cache_manager.h"
#include "tools/bench/support/bench_support.h"

namespace kvx::bench {
namespace {

constexpr int kBlockSize = 16;

// Arguments: threads (1: rewind_to is single-threaded bookkeeping), context, released.
void rewind(benchmark::State& state) {
    const int context = static_cast<int>(state.range(1));
    const int released = static_cast<int>(state.range(2));
    KvCacheManager cache((context + released) / kBlockSize + 2, kBlockSize);
    const SeqId seq = cache.create_sequence();
    std::vector<int32_t> tokens(static_cast<size_t>(context + released));  // [context + released] token ids
    std::iota(tokens.begin(), tokens.end(), 0);
    std::vector<int64_t> slots(tokens.size());  // [context + released] cache slots, unused here
    std::vector<BlockCopy> copies;
    cache.append_slots(seq, std::span(tokens).first(static_cast<size_t>(context)), slots.data(), copies);
    const auto tail = std::span(tokens).subspan(static_cast<size_t>(context));
    for (auto _ : state) {
        cache.append_slots(seq, tail, slots.data(), copies);
        const auto start = std::chrono::steady_clock::now();
        cache.rewind_to(seq, context);
        state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    state.counters["blocks_released"] = static_cast<double>(released / kBlockSize);
}

// Block size 16: 1, 16 and 256 blocks released, from a short and from a 32k-token sequence.
BENCHMARK(rewind)->Apply([](benchmark::internal::Benchmark* b) {
    b->ArgNames({"threads", "context", "released"});
    b->ArgsProduct({{1}, {1024, 32768}, {16, 256, 4096}});
    b->UseManualTime();
    // 10 ms of rewinds: the untimed appends between them take 20-30x longer, so the flag's minimum time
    // would cost seconds per size for a sub-microsecond figure.
    b->MinTime(0.01);
    b->Unit(benchmark::kMicrosecond);
});

}  // namespace
}  // namespace kvx::bench
