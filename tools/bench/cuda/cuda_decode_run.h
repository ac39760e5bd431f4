// One decode-speed measurement of kvx_cuda_decode: `batch` sequences prefilled with a random prompt, then
// decode steps in which every sequence appends one token (one Engine::forward over all of them), timed on
// the wall clock. Engine::forward returns the host logits, so each step ends with the device idle.
#pragma once

#include <cstdint>

#include "cuda/backend/cuda_backend.h"
#include "engine/runtime/engine.h"

namespace kvx::bench {

struct DecodeMeasurement {
    int batch = 0;
    int steps = 0;                  // timed decode steps
    double seconds = 0;             // wall time of the timed steps
    double mean_context = 0;        // positions each sequence attends to, averaged over the timed steps
    double weight_bytes = 0;        // the backend's weights, all read once per step (the classifier is tied)
    double kv_bytes_per_step = 0;   // K and V of every sequence at the mean context, every layer
    int64_t graph_captures = 0;     // during the timed steps
    int64_t graph_replays = 0;      // during the timed steps

    double tokens_per_second() const { return batch * static_cast<double>(steps) / seconds; }
    double ms_per_step() const { return 1e3 * seconds / steps; }
    double bytes_per_step() const { return weight_bytes + kv_bytes_per_step; }
    double gbps() const { return bytes_per_step() * steps / seconds / 1e9; }
};

// Runs `batch` new sequences of the engine (whose backend is `backend`) through a `prompt`-token prefill,
// one untimed warm-up step and `steps` timed steps, then frees them. Tokens are pseudo-random from `seed`
// (what they are does not change the work).
DecodeMeasurement measure_decode(Engine& engine, const cuda::CudaBackend& backend, int batch, int prompt,
                                 int steps, uint64_t seed);

}  // namespace kvx::bench
