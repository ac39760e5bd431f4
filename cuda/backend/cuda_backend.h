// The decoder forward pass on an NVIDIA GPU: the CUDA counterpart of cpu/backend/cpu_backend.h, behind the
// same Backend interface and reading the same DecoderPlan (traits, KV layout, activation widths, attention
// arguments), so the engine's cache manager, sequences, sampler and generation loop drive it unchanged.
//
// Device memory (plain cudaMalloc): every weight uploaded once in its stored dtype (q8 / q4 matrices as their
// integers, scales and offsets, plus one fp16 scratch as large as the largest, which a prefill dequantizes each
// into before cuBLAS); per layer a K and a V pool [num_blocks][n_kv_heads][block_size][head_dim] of the plan's
// KV dtype; scratch activations for the largest batch seen; the batch's metadata (tokens, positions, slots,
// block tables, attention tiles) staged through one pinned host buffer and one device buffer per forward pass.
// Matrix products: the hand-written GEMV for decode-sized batches (n <= kGemvMaxRows), cuBLAS beyond (fp32
// SGEMM with TF32 off, so results match the CPU; fp16 weights through cublasGemmEx with fp32 accumulation;
// quantized weights through the quantized GEMV, or dequantized to fp16 then cublasGemmEx).
//
// CUDA graphs: a decode step whose shape repeats (same rows, same logit rows, block tables no wider than a
// bucket) is captured once and replayed; the metadata buffers are fixed, so a replay only uploads them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "engine/runtime/backend.h"

namespace kvx::cuda {

struct CudaBackendOptions {
    bool cuda_graphs = true;   // capture and replay decode steps
    bool hand_gemv = true;     // false: cuBLAS for every matrix product (to measure the GEMV against it)
};

class CudaBackend final : public Backend {
public:
    // Uploads the weights. Throws kvx::Error when no CUDA device is usable, when the model does not fit the
    // device's memory, or for shapes the kernels do not support (head_dim > 256).
    CudaBackend(const Model& model, const CudaBackendOptions& options = {});
    ~CudaBackend() override;

    std::string name() const override;
    void allocate_kv(const DecoderPlan& plan) override;
    void copy_blocks(std::span<const std::vector<BlockCopy>> copies) override;
    void forward(const ForwardBatch& batch, float* logits) override;
    // Greedy, or sampling with 1 <= top_k <= kMaxDeviceTopK (cuda/kernels/cuda_kernels.h), on the device.
    bool can_sample(const SamplerOptions& options) const override;
    int32_t forward_sample(const ForwardBatch& batch, const SamplerOptions& options, double uniform) override;

    // Bytes of weights a decode step reads (every matrix once; of the embeddings only a row per token), and
    // device bytes of the whole KV pool.
    size_t weight_bytes() const;
    size_t kv_pool_bytes() const;
    // Decode steps served by replaying a captured graph, and graphs captured, since construction.
    int64_t graph_replays() const;
    int64_t graph_captures() const;

private:
    struct State;
    std::unique_ptr<State> state_;
};

}  // namespace kvx::cuda
