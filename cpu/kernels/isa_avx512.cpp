// The AVX-512 kernels. Compiled with -mavx512f -mavx512bw -mavx512vl -mfma -mf16c (cpu/kernels/CMakeLists.txt)
// and called only after cpu_kernels.cpp has checked that the CPU and OS support them.
//
// Same rule as isa_avx2.cpp: the kernels have internal linkage and use no inline function of the standard
// library, so no code compiled for AVX-512 can be picked by the linker for other callers.

// GCC 12.2's AVX-512 intrinsics fill their pass-through operand with _mm512_undefined_ps(), a
// self-initialised variable that -Wuninitialized reports wherever they are inlined (GCC PR 105593, fixed
// in later releases). Silenced for this unit only: the kernel code in it is shared with isa_avx2.cpp and
// isa_portable.cpp, which compile with the warning on.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "cpu/kernels/isa_kernel_tables.h"

namespace kvx::cpu::avx512 {
namespace {

constexpr char kTableName[] = "cpu-avx512";

#include "cpu/kernels/vec_avx512.inc"
#include "cpu/kernels/vec_f16_store_avx512.inc"
#include "cpu/kernels/quant_lanes_avx512.inc"
#include "cpu/kernels/quant_row_lanes_x86.inc"
#include "cpu/kernels/exp_polynomial.inc"
#include "cpu/kernels/isa_kernels.inc"

}  // namespace

const IsaTables& tables() { return kIsaTables; }

}  // namespace kvx::cpu::avx512
