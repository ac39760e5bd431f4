// A quantized matrix copied into row groups (kernels/quant_row_groups.h) by the loaders that make such copies:
// the GGUF loader (gguf_matrix.cpp) and the CPU backend's copies of a model folder's matrices
// (cpu/backend/weight_copies.cpp). kernels/ links no OpenMP, so the parallel loop lives here.
#pragma once

#include <cstdint>

#include "kernels/quant_matrix.h"

namespace kvx {

// Writes the row groups of rows [first_row, end_row) of the copy of a matrix [rows][.] at dst
// (row_groups_copy_at), on every core, from w, which holds that matrix's rows from first_row on in rows layout;
// with end_row == rows, also the padding groups past the last row. first_row is a multiple of 8, and so is
// end_row but at the matrix's end. Groups touch disjoint bytes: the first touch of a model's weights is
// seconds of page faults and copying at 3B on one core.
void copy_row_groups(const QuantMatrix& w, int64_t rows, uint8_t* dst, int64_t first_row, int64_t end_row);

}  // namespace kvx
