// The portable kernels: the same kernel code as the SIMD levels over a plain-array Vec, compiled with the
// project's baseline flags. Runs on any machine, and is the only level off x86.
#include <omp.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "cpu/kernels/isa_kernel_tables.h"
#include "kernels/f16.h"

namespace kvx::cpu::portable {
namespace {

constexpr char kTableName[] = "cpu-portable";

#include "cpu/kernels/vec_portable.inc"
#include "cpu/kernels/vec_f16_store_portable.inc"
#include "cpu/kernels/quant_lanes_portable.inc"
#include "cpu/kernels/quant_row_lanes_portable.inc"
#include "cpu/kernels/isa_kernels.inc"

}  // namespace

const IsaTables& tables() { return kIsaTables; }

}  // namespace kvx::cpu::portable
