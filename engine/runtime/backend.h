// What the engine needs from a compute backend: KV storage for the block pools, block copies for
// copy-on-write, and the model's forward pass over a ForwardBatch. The CPU backend (cpu/backend/) runs any
// CPU KernelTable, the reference one included; the CUDA backend (cuda/backend/) implements the same
// interface over device memory. Both take their sizes and layouts from the DecoderPlan the Engine hands
// them, so they agree on every number.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/runtime/decoder_plan.h"
#include "engine/runtime/forward_batch.h"
#include "engine/runtime/sampler.h"
#include "kernels/block_copy.h"

namespace kvx {

class Backend {
public:
    virtual ~Backend() = default;
    virtual std::string name() const = 0;

    // Allocates K/V storage as plan.kv() lays it out (every layer's pools in its group's block count) and
    // keeps the plan for the forward passes. Called once, by the Engine, before any forward.
    virtual void allocate_kv(const DecoderPlan& plan) = 0;
    // Performs the copy-on-write copies the cache manager recorded, copies[g] in group g's blocks (its
    // layers, K and V).
    virtual void copy_blocks(std::span<const std::vector<BlockCopy>> copies) = 0;

    // Runs the model over the batch: appends every row's K/V at its group's slot, then writes the logits
    // of the rows in batch.logit_rows to logits [logit_rows.size()][vocab_size].
    virtual void forward(const ForwardBatch& batch, float* logits) = 0;

    // Optional: the forward pass of a batch with exactly one logit row, and that row's next token picked
    // where the logits are (on a GPU, so that only the token crosses to the host), as Sampler::sample would
    // pick it with these options and, for temperature > 0, the draw `uniform` (Sampler::next_uniform).
    // can_sample says for which options a backend does this; Engine::forward_and_sample asks it first.
    virtual bool can_sample(const SamplerOptions&) const { return false; }
    virtual int32_t forward_sample(const ForwardBatch& batch, const SamplerOptions& options, double uniform);
};

}  // namespace kvx
