// What every CUDA benchmark in kvx-bench shares: the stream it runs on, the device's copy ceiling its
// bandwidth is quoted against, the data rotation that keeps its inputs out of the L2 cache, and the timing.
//
// Timing: after a warm-up, `launches` calls of the kernel are captured into one CUDA graph and each
// benchmark iteration replays it between two CUDA events. A replay lasts about kReplaySeconds, so the
// events' resolution and the host's launch overhead (a few microseconds per kernel, more than a small
// GEMV takes) do not show; the gaps between kernels on the device do, as in a real decode step. The
// iteration's manual time is the replay's device time over `launches`: Google Benchmark's time column is
// per kernel call. Each benchmark runs a fixed kReplays iterations (its min_time is not used: a replay is
// `launches` calls, so the usual calibration would run each benchmark for `launches` times min_time).
//
// Counters, per call: bytes (what the call must move, as each benchmark defines it), GB/s,
// frac_of_copy_bw (GB/s over the device-to-device copy bandwidth measured at start-up), launches_per_replay.
#pragma once

#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cuda/kernels/device_buffer.h"

namespace kvx::cuda::bench {

constexpr double kReplaySeconds = 2e-3;
constexpr int64_t kMaxLaunchesPerReplay = 4096;
constexpr int64_t kReplays = 20;

// Set once at start-up, before any benchmark runs.
void set_copy_ceiling_gbps(double gbps);

// The non-blocking stream every benchmark enqueues on (stream capture refuses the legacy default stream).
cudaStream_t bench_stream();
int sm_count();

// How many copies of a `bytes_per_copy` working set the launches cycle through so that together they exceed
// the L2 cache four times over: no call finds its inputs in the L2, as in a decode step, which reads every
// weight and K/V row once.
int rotation_copies(size_t bytes_per_copy);

// Enqueues one kernel call on the stream, on copy `copy` (0 .. copies - 1) of the data.
using Launch = std::function<void(int copy, cudaStream_t stream)>;

// The benchmark loop: warm-up, capture, timed replays, counters. Each call moves `bytes_per_call`.
void run_timed(benchmark::State& state, int copies, double bytes_per_call, const Launch& launch);

// Registers a CUDA benchmark: named arguments, manual time in microseconds, kReplays iterations. An
// exception from `body` (a failed CUDA call, out of memory) ends that benchmark with SkipWithError.
benchmark::internal::Benchmark* register_cuda_benchmark(const std::string& name,
                                                        std::function<void(benchmark::State&)> body,
                                                        const std::vector<std::string>& arg_names);

// Device buffers of `count` uniform pseudo-random values in [-1, 1), fp32 or fp16 bits, the same for the
// same seed (filled on the host with kvx-bench's fill_random, then uploaded).
DeviceBuffer<float> random_f32(size_t count, uint64_t seed);
DeviceBuffer<uint16_t> random_f16(size_t count, uint64_t seed);

// Uploads a host vector into a new device buffer.
template <class T>
DeviceBuffer<T> upload(const std::vector<T>& host) {
    DeviceBuffer<T> device;
    device.upload(host);
    return device;
}

// The benchmarks of each file, registered by register_cuda_benchmarks (tools/bench/cuda/cuda_benchmarks.h).
void register_attention_benchmarks();
void register_gemv_benchmarks();
void register_kv_ops_benchmarks();

}  // namespace kvx::cuda::bench
