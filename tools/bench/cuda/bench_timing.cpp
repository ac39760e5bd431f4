#include "tools/bench/cuda/bench_timing.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <optional>
#include <span>
#include <stdexcept>

#include "cuda/kernels/cuda_check.h"
#include "tools/bench/cuda/event_timer.h"
#include "tools/bench/support/bench_support.h"

namespace kvx::cuda::bench {
namespace {

std::optional<double> g_copy_gbps;  // set by register_cuda_benchmarks

// One CUDA graph holding the calls enqueued by `enqueue`, instantiated for replay.
class CapturedCalls {
public:
    CapturedCalls(cudaStream_t stream, const std::function<void()>& enqueue) {
        check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
        try {
            enqueue();
        } catch (...) {
            // End the capture so that the stream is usable by the next benchmark.
            cudaGraph_t partial = nullptr;
            cudaStreamEndCapture(stream, &partial);
            if (partial) cudaGraphDestroy(partial);
            throw;
        }
        check(cudaStreamEndCapture(stream, &graph_), "cudaStreamEndCapture");
        const cudaError_t status = cudaGraphInstantiate(&exec_, graph_, 0);
        if (status != cudaSuccess) {
            cudaGraphDestroy(graph_);
            check(status, "cudaGraphInstantiate");
        }
    }
    ~CapturedCalls() {
        cudaGraphExecDestroy(exec_);
        cudaGraphDestroy(graph_);
    }
    CapturedCalls(const CapturedCalls&) = delete;
    CapturedCalls& operator=(const CapturedCalls&) = delete;

    void replay(cudaStream_t stream) { check(cudaGraphLaunch(exec_, stream), "cudaGraphLaunch"); }

private:
    cudaGraph_t graph_ = nullptr;
    cudaGraphExec_t exec_ = nullptr;
};

int device_attribute(cudaDeviceAttr attribute, const char* what) {
    int value = 0;
    check(cudaDeviceGetAttribute(&value, attribute, 0), what);
    return value;
}

// Calls per replay: enough for about kReplaySeconds of device time, and at least one pass over every copy.
int64_t launches_per_replay(double seconds_per_call, int copies) {
    const double wanted = std::ceil(kReplaySeconds / std::max(seconds_per_call, 1e-9));
    return std::min<int64_t>(kMaxLaunchesPerReplay, std::max<int64_t>(copies, static_cast<int64_t>(wanted)));
}

}  // namespace

void run_timed(benchmark::State& state, int copies, double bytes_per_call, const Launch& launch) {
    if (!g_copy_gbps) throw std::logic_error("kvx-bench: the copy ceiling is measured before CUDA benchmarks run");
    cudaStream_t stream = bench_stream();
    EventTimer timer;

    // Warm-up: the first call of a kernel loads its module and cuBLAS picks its algorithm. It also times
    // the calls launched one by one, an upper bound of their device time (the host may not keep up) that
    // only sizes the replay.
    const int probe_calls = std::max(copies, 8);
    for (int i = 0; i < copies; ++i) launch(i, stream);
    timer.start(stream);
    for (int i = 0; i < probe_calls; ++i) launch(i % copies, stream);
    const int64_t launches = launches_per_replay(timer.stop_and_wait(stream) / probe_calls, copies);

    CapturedCalls calls(stream, [&] {
        for (int64_t i = 0; i < launches; ++i) launch(static_cast<int>(i % copies), stream);
    });
    calls.replay(stream);  // the first replay uploads the graph to the device
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");

    double seconds = 0;  // device time of every timed replay
    for (auto _ : state) {
        timer.start(stream);
        calls.replay(stream);
        const double replay = timer.stop_and_wait(stream);
        state.SetIterationTime(replay / static_cast<double>(launches));
        seconds += replay;
    }
    const double gbps = bytes_per_call * static_cast<double>(launches * state.iterations()) / seconds / 1e9;
    state.counters["bytes"] = bytes_per_call;
    state.counters["GB/s"] = gbps;
    state.counters["frac_of_copy_bw"] = gbps / *g_copy_gbps;
    state.counters["launches_per_replay"] = static_cast<double>(launches);
}

void set_copy_ceiling_gbps(double gbps) { g_copy_gbps = gbps; }

cudaStream_t bench_stream() {
    // Created on first use and kept for the process: every benchmark shares it.
    static const cudaStream_t stream = [] {
        cudaStream_t s = nullptr;
        check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
        return s;
    }();
    return stream;
}

int sm_count() {
    static const int count = device_attribute(cudaDevAttrMultiProcessorCount, "cudaDeviceGetAttribute (SM count)");
    return count;
}

int rotation_copies(size_t bytes_per_copy) {
    static const size_t rotation_bytes =
        std::max<size_t>(size_t{64} << 20,
                         4 * static_cast<size_t>(device_attribute(cudaDevAttrL2CacheSize, "cudaDeviceGetAttribute (L2 size)")));
    return static_cast<int>((rotation_bytes + bytes_per_copy - 1) / std::max<size_t>(bytes_per_copy, 1));
}

benchmark::internal::Benchmark* register_cuda_benchmark(const std::string& name,
                                                        std::function<void(benchmark::State&)> body,
                                                        const std::vector<std::string>& arg_names) {
    // A failed CUDA call (kvx::Error) ends this benchmark with its message; the next one runs.
    auto guarded = [body = std::move(body)](benchmark::State& state) {
        try {
            body(state);
        } catch (const std::exception& e) {
            state.SkipWithError(e.what());
        }
    };
    return benchmark::RegisterBenchmark(name.c_str(), std::move(guarded))
        ->ArgNames(arg_names)
        ->UseManualTime()
        ->Iterations(kReplays)
        ->Unit(benchmark::kMicrosecond);
}

DeviceBuffer<float> random_f32(size_t count, uint64_t seed) {
    std::vector<float> host(count);  // [count]
    kvx::bench::fill_random(host, seed);
    return upload(host);
}

DeviceBuffer<uint16_t> random_f16(size_t count, uint64_t seed) {
    std::vector<uint16_t> host(count);  // [count] fp16 bits
    kvx::bench::fill_random_f16(host, seed);
    return upload(host);
}

}  // namespace kvx::cuda::bench
