// Streams, events, kernel launches and CUDA graphs on the host. Every stream is in order and the host runs
// its work at once, so synchronising is a no-op; what stays observable is capture: while a stream captures,
// its launches, copies and cuBLAS calls are recorded as closures over the same arguments and addresses, and
// cudaGraphLaunch runs them again in order. That is the property kvx's graph cache relies on (a replay reads
// whatever the captured addresses hold now), and the one thing a replay can get wrong.
#include <cuda_runtime_api.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <string>
#include <vector>

#include "tools/cuda_emulation/emu_device.h"
#include "tools/cuda_emulation/emu_runtime.h"
#include "tools/cuda_emulation/fibers.h"

struct CUgraph_st {
    std::vector<std::function<void()>> work;
};
struct CUgraphExec_st {
    std::vector<std::function<void()>> work;
};
struct CUstream_st {
    CUgraph_st* capturing = nullptr;  // the graph being captured into, or null
};
struct CUevent_st {
    std::chrono::steady_clock::time_point recorded{};
};

namespace {

// The H100 SXM's launch limits (cudaGetDeviceProperties' values, device.cpp).
constexpr size_t kDefaultDynamicSmem = 48 * 1024;  // without cudaFuncSetAttribute
constexpr int kMaxDynamicSmemOptIn = 227 * 1024;

std::mutex kernel_limits_mutex;
std::map<EmuKernelId, int> kernel_smem_limit;  // cudaFuncAttributeMaxDynamicSharedMemorySize per kernel

int smem_limit(EmuKernelId kernel) {
    std::lock_guard lock(kernel_limits_mutex);
    const auto it = kernel_smem_limit.find(kernel);
    return it == kernel_smem_limit.end() ? static_cast<int>(kDefaultDynamicSmem) : it->second;
}

void check_launch_shape(EmuKernelId kernel, dim3 grid, dim3 block, size_t smem_bytes) {
    if (block.y != 1 || block.z != 1) emu_fail("2-D/3-D blocks not emulated");
    if (block.x == 0 || block.x > 1024) emu_fail("blockDim.x out of 1 .. 1024");
    if (grid.x == 0 || grid.y == 0 || grid.z == 0) emu_fail("empty grid (cudaErrorInvalidConfiguration)");
    if (grid.x > 2147483647u || grid.y > 65535u || grid.z > 65535u) emu_fail("grid dimension over its limit");
    if (smem_bytes > static_cast<size_t>(smem_limit(kernel)))
        emu_fail(("launch with " + std::to_string(smem_bytes) + " bytes of dynamic shared memory, over the kernel's " +
                  std::to_string(smem_limit(kernel)) + " (cudaFuncSetAttribute MaxDynamicSharedMemorySize)")
                     .c_str());
}

thread_local cudaError_t last_error = cudaSuccess;

cudaError_t fail(cudaError_t e) {
    last_error = e;
    return e;
}

}  // namespace

cudaError_t emu_enqueue(cudaStream_t stream, std::function<void()> work) {
    if (stream && stream->capturing) {
        stream->capturing->work.push_back(std::move(work));
        return cudaSuccess;
    }
    work();
    return cudaSuccess;
}

void emu_launch_erased(EmuKernelId kernel, std::function<void()> body, dim3 grid, dim3 block, size_t smem_bytes,
                       cudaStream_t stream) {
    check_launch_shape(kernel, grid, block, smem_bytes);
    emu_enqueue(stream, [body = std::move(body), grid, block, smem_bytes] { emu_run_grid(body, grid, block, smem_bytes); });
}

cudaError_t emu_func_set_attribute(EmuKernelId kernel, cudaFuncAttribute attribute, int value) {
    if (attribute != cudaFuncAttributeMaxDynamicSharedMemorySize)
        emu_fail(("cudaFuncSetAttribute: attribute " + std::to_string(attribute) + " is not emulated").c_str());
    if (value < 0 || value > kMaxDynamicSmemOptIn) return fail(cudaErrorInvalidValue);
    std::lock_guard lock(kernel_limits_mutex);
    kernel_smem_limit[kernel] = value;
    return cudaSuccess;
}

extern "C" {

cudaError_t cudaGetLastError() { return std::exchange(last_error, cudaSuccess); }
cudaError_t cudaPeekAtLastError() { return last_error; }

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
    *stream = new CUstream_st;
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) { return cudaStreamCreate(stream); }
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    if (!stream) return fail(cudaErrorInvalidResourceHandle);
    if (stream->capturing) emu_fail("cudaStreamDestroy of a stream that is capturing");
    delete stream;
    return cudaSuccess;
}
// Synchronising a capturing stream is an error on a GPU too (and invalidates the capture).
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    if (stream && stream->capturing) return fail(cudaErrorStreamCaptureUnsupported);
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode) {
    if (!stream) return fail(cudaErrorStreamCaptureUnsupported);  // the legacy default stream cannot capture
    if (stream->capturing) return fail(cudaErrorIllegalState);
    stream->capturing = new CUgraph_st;
    return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
    if (!stream || !stream->capturing) return fail(cudaErrorIllegalState);
    *graph = std::exchange(stream->capturing, nullptr);
    return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
    *status = stream && stream->capturing ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
    return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
    if (!graph) return fail(cudaErrorInvalidValue);
    *exec = new CUgraphExec_st{graph->work};
    return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
    if (!exec) return fail(cudaErrorInvalidValue);
    for (const auto& work : exec->work) emu_enqueue(stream, work);
    return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    delete graph;
    return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    delete exec;
    return cudaSuccess;
}

// Events time the host's own execution: meaningless as GPU timings, there only so that timing code runs.
cudaError_t cudaEventCreate(cudaEvent_t* event) {
    *event = new CUevent_st;
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) { return cudaEventCreate(event); }
cudaError_t cudaEventDestroy(cudaEvent_t event) {
    delete event;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    return emu_enqueue(stream, [event] { event->recorded = std::chrono::steady_clock::now(); });
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    *ms = std::chrono::duration<float, std::milli>(end->recorded - start->recorded).count();
    return cudaSuccess;
}

}  // extern "C"
