// A weight matrix as the model holds it: fp32, fp16 or quantized (kernels/quant_matrix.h), whatever file it
// came from.
#pragma once

#include <cstdint>

#include "engine/model/model_config.h"
#include "kernels/quant_matrix.h"

namespace kvx {

// A weight matrix [rows][cols], row-major, in the model's stored dtype (config.weights_dtype). Linear layers
// are [out_features][in_features]; embeddings [vocab_size or max_seq_len][dim].
struct WeightMatrix {
    const void* data = nullptr;  // float* for f32, uint16_t* (IEEE fp16 bits) for f16, quant.q for q8 / q4
    WeightDtype dtype = WeightDtype::f32;
    int64_t rows = 0;
    int64_t cols = 0;
    QuantMatrix quant;           // q8 / q4 only: the integers, scales and offsets (kernels/quant_matrix.h)

    bool quantized() const { return dtype == WeightDtype::q8 || dtype == WeightDtype::q4; }
    const float* f32() const { return static_cast<const float*>(data); }
    const uint16_t* f16() const { return static_cast<const uint16_t*>(data); }
    // Row r as fp32 into out[cols]: an embedding lookup.
    void row_to_f32(int64_t r, float* out) const;
};

}  // namespace kvx
