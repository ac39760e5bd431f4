#include "engine/model/weight_matrix.h"

#include "kernels/f16.h"

namespace kvx {

void WeightMatrix::row_to_f32(int64_t r, float* out) const {
    if (quantized()) {
        dequantize_row(quant, r, cols, out);
    } else if (dtype == WeightDtype::f32) {
        const float* row = f32() + r * cols;
        for (int64_t j = 0; j < cols; ++j) out[j] = row[j];
    } else {
        const uint16_t* row = f16() + r * cols;
        for (int64_t j = 0; j < cols; ++j) out[j] = f16_to_f32(row[j]);
    }
}

}  // namespace kvx
