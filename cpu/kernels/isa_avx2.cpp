// The AVX2 + FMA kernels. Compiled with -mavx2 -mfma -mf16c (cpu/kernels/CMakeLists.txt) and called only after
// cpu_kernels.cpp has checked that the CPU and OS support them.
//
// No code compiled here may end up running on a machine without AVX2. An inline function is emitted by
// every unit that uses it, each copy compiled with that unit's flags, and the linker keeps one copy for
// the whole program: a std::max<float> instantiated here could become the one every caller runs. So the
// kernels have internal linkage (an anonymous namespace) and use no inline function of the standard
// library; intrinsics are always inlined and the OpenMP runtime is extern "C". Only tables() is
// exported.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "cpu/kernels/isa_kernel_tables.h"

namespace kvx::cpu::avx2 {
namespace {

constexpr char kTableName[] = "cpu-avx2";

#include "cpu/kernels/vec_avx2.inc"
#include "cpu/kernels/vec_f16_store_avx2.inc"
#include "cpu/kernels/quant_lanes_avx2.inc"
#include "cpu/kernels/quant_row_lanes_avx2.inc"
#include "cpu/kernels/exp_polynomial.inc"
#include "cpu/kernels/isa_kernels.inc"

}  // namespace

const IsaTables& tables() { return kIsaTables; }

}  // namespace kvx::cpu::avx2
