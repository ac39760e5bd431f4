#include "engine/model/row_group_copy.h"

#include "kernels/quant_row_groups.h"

namespace kvx {

void copy_row_groups(const QuantMatrix& w, int64_t rows, uint8_t* dst, int64_t first_row, int64_t end_row) {
    const int64_t g_end = end_row == rows ? row_group_count(rows) : end_row / kQuantGroupRows;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (int64_t g = first_row / kQuantGroupRows; g < g_end; ++g) copy_row_group(w, rows, dst, g, first_row);
}

}  // namespace kvx
