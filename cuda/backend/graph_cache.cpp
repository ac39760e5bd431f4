#include "cuda/backend/graph_cache.h"

#include "cuda/kernels/cuda_check.h"

namespace kvx::cuda {

void GraphCache::clear() {
    for (auto& [shape, entry] : graphs_)
        if (entry.exec) cudaGraphExecDestroy(entry.exec);
    graphs_.clear();
}

void GraphCache::run(const StagingShape& shape, uint64_t generation, cudaStream_t stream,
                     const std::function<void()>& enqueue) {
    if (graphs_.size() >= kMaxGraphs && !graphs_.contains(shape)) clear();
    Entry& entry = graphs_[shape];
    if (entry.exec && entry.generation != generation) {
        cudaGraphExecDestroy(entry.exec);
        entry.exec = nullptr;
    }
    if (entry.exec) {
        check(cudaGraphLaunch(entry.exec, stream), "cudaGraphLaunch");
        ++replays_;
        return;
    }
    // The first pass of a shape runs directly: it also warms up what must not happen during a capture
    // (cuBLAS's kernel choice, raising a kernel's shared-memory limit). Shapes seen once (a prefill) never
    // pay for a capture.
    if (++entry.seen < 2) {
        enqueue();
        return;
    }
    // Relaxed: the capture must not forbid the launch functions' cudaFuncSetAttribute calls.
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
    cudaGraph_t graph = nullptr;
    try {
        enqueue();
    } catch (...) {
        cudaStreamEndCapture(stream, &graph);
        if (graph) cudaGraphDestroy(graph);
        throw;
    }
    check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
    const cudaError_t status = cudaGraphInstantiate(&entry.exec, graph, 0);
    cudaGraphDestroy(graph);
    check(status, "cudaGraphInstantiate");
    entry.generation = generation;
    ++captures_;
    check(cudaGraphLaunch(entry.exec, stream), "cudaGraphLaunch");
    ++replays_;
}

}  // namespace kvx::cuda
