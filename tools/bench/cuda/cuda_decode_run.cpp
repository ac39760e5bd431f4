#include "tools/bench/cuda/cuda_decode_run.h"

#include <chrono>
#include <random>
#include <vector>

namespace kvx::bench {

DecodeMeasurement measure_decode(Engine& engine, const cuda::CudaBackend& backend, int batch, int prompt,
                                 int steps, uint64_t seed) {
    std::mt19937 generator(static_cast<std::mt19937::result_type>(seed));
    std::uniform_int_distribution<int32_t> token(0, engine.vocab_size() - 1);

    std::vector<SeqId> sequences;  // [batch]
    std::vector<int32_t> prompt_tokens(static_cast<size_t>(prompt));  // [prompt], refilled for each sequence
    for (int b = 0; b < batch; ++b) {
        sequences.push_back(engine.new_sequence());
        for (int32_t& t : prompt_tokens) t = token(generator);
        engine.forward({SequenceInput{sequences.back(), prompt_tokens}});
    }

    std::vector<int32_t> next(static_cast<size_t>(batch));  // [batch]: the token each sequence appends this step
    std::vector<SequenceInput> inputs;                       // [batch], one token each
    for (int b = 0; b < batch; ++b)
        inputs.push_back({sequences[static_cast<size_t>(b)], std::span<const int32_t>(&next[static_cast<size_t>(b)], 1)});
    auto step = [&] {
        for (int32_t& t : next) t = token(generator);
        engine.forward(inputs);
    };

    step();  // warm-up: the first decode step of this shape captures its CUDA graph
    const int32_t length_before = engine.length(sequences.front());
    const int64_t captures_before = backend.graph_captures();
    const int64_t replays_before = backend.graph_replays();
    const auto start = std::chrono::steady_clock::now();
    for (int s = 0; s < steps; ++s) step();
    const auto stop = std::chrono::steady_clock::now();

    DecodeMeasurement m;
    m.batch = batch;
    m.steps = steps;
    m.seconds = std::chrono::duration<double>(stop - start).count();
    // Step s (1-based) attends to length_before + s positions.
    m.mean_context = length_before + (steps + 1) / 2.0;
    m.weight_bytes = static_cast<double>(backend.weight_bytes());
    const double kv_bytes_per_token = static_cast<double>(engine.kv_bytes_per_block()) / engine.cache().block_size();
    m.kv_bytes_per_step = batch * m.mean_context * kv_bytes_per_token;
    m.graph_captures = backend.graph_captures() - captures_before;
    m.graph_replays = backend.graph_replays() - replays_before;
    for (SeqId seq : sequences) engine.free_sequence(seq);
    return m;
}

}  // namespace kvx::bench
