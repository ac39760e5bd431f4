// The harness on the CPU: every SIMD level this machine runs (cpu/kernels/cpu_kernels.h), each against the
// oracles, and the reference where the harness computes the oracle. A level the machine cannot run is named as left out. `kvx_cpu_kernel_ops [op]` runs the ops whose
// name contains op.
#include <algorithm>
#include <cstdio>
#include <string>

#include "cpu/kernels/cpu_kernels.h"
#include "tests/kernel_ops/op_harness.h"

int main(int argc, char* argv[]) {
    using kvx::cpu::SimdLevel;
    // The reference joins the rows of the ops whose oracle the harness computes itself (matmul_q).
    std::vector<kvx::ops::Implementation> implementations = {
        {.name = "reference", .table = kvx::reference_kernels(), .is_reference = true}};
    const std::vector<SimdLevel> supported = kvx::cpu::supported_simd_levels();
    for (SimdLevel level : {SimdLevel::portable, SimdLevel::avx2, SimdLevel::avx512}) {
        if (std::find(supported.begin(), supported.end(), level) == supported.end()) {
            std::printf("kernel ops: SIMD level %s left out: this machine cannot run it\n", kvx::cpu::simd_level_name(level));
            continue;
        }
        const kvx::KernelTable& table = kvx::cpu::cpu_kernels(level);
        implementations.push_back({.name = table.name, .table = table, .rounds_quant_x = true});
    }
    return kvx::ops::run_table(implementations, argc > 1 ? argv[1] : "") == 0 ? 0 : 1;
}
