// The harness on the CPU: every SIMD level this machine runs (cpu/kernels/cpu_kernels.h), each against the
// oracles, the best level again at another thread count, and the reference where the harness computes the
// oracle. A level the machine cannot run is named as left out. `kvx_cpu_kernel_ops [op]` runs the ops whose
// name contains op, `kvx_cpu_kernel_ops '!op'` the others.
#include <algorithm>
#include <cstdio>
#include <omp.h>
#include <string>

#include "cpu/kernels/cpu_kernels.h"
#include "tests/kernel_ops/op_harness.h"

int main(int argc, char* argv[]) {
    using kvx::cpu::SimdLevel;
    // The reference joins the rows of the ops whose oracle the harness computes itself (matmul_q).
    std::vector<kvx::ops::Implementation> implementations = {
        {.name = "reference", .table = kvx::reference_kernels(), .is_reference = true}};
    const std::vector<SimdLevel> supported = kvx::cpu::supported_simd_levels();
    for (SimdLevel level : {SimdLevel::portable, SimdLevel::avx2, SimdLevel::avx512, SimdLevel::avx512_vnni}) {
        if (std::find(supported.begin(), supported.end(), level) == supported.end()) {
            std::printf("kernel ops: SIMD level %s left out: this machine or this build cannot run it\n",
                        kvx::cpu::simd_level_name(level));
            continue;
        }
        const kvx::KernelTable& table = kvx::cpu::cpu_kernels(level);
        implementations.push_back({.name = table.name, .table = table, .rounds_quant_x = true});
    }
    // The best level once more on the other side of the thread split: one thread where the default is
    // several, else two (oversubscribed on one core, which changes only the speed), so that both the serial
    // path and the split of the work between threads are checked on every machine.
    const int other_threads = omp_get_max_threads() > 1 ? 1 : 2;
    const kvx::KernelTable& best = kvx::cpu::cpu_kernels(kvx::cpu::best_simd_level());
    implementations.push_back({.name = std::string(best.name) + " threads:" + std::to_string(other_threads),
                               .table = best,
                               .rounds_quant_x = true,
                               .threads = other_threads});
    return kvx::ops::run_table(implementations, argc > 1 ? argv[1] : "") == 0 ? 0 : 1;
}
