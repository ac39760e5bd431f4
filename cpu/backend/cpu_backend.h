// The CPU backend: the decoder forward pass on host memory, computed by any KernelTable (the SIMD kernels
// of cpu/kernels/ for speed, the reference kernels as the oracle). The matrices every step streams are read
// from copies in huge pages (weight_copies.h), in their stored dtype (f32, f16 or quantized) or, for the
// quantized matrices the kernels read faster in another layout (KernelTable::matmul_q_layout), in that one.
// The layers' sequence of ops is engine/runtime/forward_recipe.h's, shared with the CUDA backend; every size
// comes from the Engine's DecoderPlan.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/model/model.h"
#include "cpu/backend/huge_page_buffer.h"
#include "cpu/backend/weight_copies.h"
#include "engine/runtime/backend.h"
#include "kernels/kernels.h"

namespace kvx::cpu {

class CpuBackend final : public Backend {
public:
    // Throws kvx::Error when the kernel table lacks a kernel this model needs (allocate_kv: or its cache).
    CpuBackend(const Model& model, const KernelTable& kernels);

    std::string name() const override { return kernels_.name; }
    void allocate_kv(const DecoderPlan& plan) override;
    void copy_blocks(std::span<const std::vector<BlockCopy>> copies) override;
    void forward(const ForwardBatch& batch, float* logits) override;

private:
    class Ops;  // the forward recipe's ops on this backend's kernels, weights and caches
    void ensure_scratch(int32_t n_rows);
    void embed(const ForwardBatch& batch);
    void rope_tables(const ForwardBatch& batch, const float* inv_freq, float* cos, float* sin);

    const Model& model_;
    const KernelTable& kernels_;
    WeightCopies weights_;  // what linear() reads
    std::optional<DecoderPlan> plan_;  // set by allocate_kv
    // [n_layers][its group's num_blocks][n_kv_heads][block_size][head_dim] of the plan's KV dtype, as bytes so
    // one member serves both types. On huge pages: a long sequence's blocks lie all over its pool, and with 4 KiB
    // pages nearly every block of every KV head cost attention a TLB miss (docs/kv-cache.md).
    std::vector<HugePageBuffer> k_cache_;
    std::vector<HugePageBuffer> v_cache_;  // same layout as k_cache_

    // Scratch, grown to the largest batch seen and then reused: no allocation in steady decode. Widths are
    // the plan's ActivationWidths.
    int32_t scratch_rows_ = 0;
    std::vector<float> x_;       // [n_rows][dim] residual stream
    std::vector<float> xn_;      // [n_rows][dim] normalised input of the current block (pre-norms only)
    std::vector<float> q_;       // [n_rows][n_heads][head_dim]
    std::vector<float> k_;       // [n_rows][n_kv_heads][head_dim]
    std::vector<float> v_;       // [n_rows][n_kv_heads][head_dim]
    std::vector<float> att_;     // [n_rows][n_heads][head_dim] attention output before wo
    std::vector<float> gate_;    // [n_rows][hidden_dim] gated MLP (SwiGLU) only
    std::vector<float> up_;      // [n_rows][hidden_dim] MLP inner activations
    std::vector<float> proj_;    // [n_rows][dim] output of wo / w_down before the residual add
    std::vector<float> pos_row_; // [dim] one learned position embedding converted to fp32
    std::vector<float> attn_out_;  // [n_rows][dim] parallel residual only: the attention's output
    std::vector<float> rope_cos_;  // [n_rows][rotary_dim / 2] rotary positions only
    std::vector<float> rope_sin_;  // [n_rows][rotary_dim / 2] rotary positions only
    std::vector<float> rope_cos_local_;  // [n_rows][rotary_dim / 2] from rope_inv_freq_local (rope_local_layers)
    std::vector<float> rope_sin_local_;  // [n_rows][rotary_dim / 2]
};

}  // namespace kvx::cpu
