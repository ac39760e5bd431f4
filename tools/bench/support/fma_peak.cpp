#include "tools/bench/support/fma_peak.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KVX_FMA_X86 1
#endif

namespace kvx::bench {
namespace {

// acc = acc * kMultiplier + kAddend converges to kAddend / (1 - kMultiplier): no overflow, no subnormals.
constexpr float kMultiplier = 0.999f, kAddend = 0.001f;

// Each function runs `iterations` steps of kChains independent chains and returns the flops it did, with the
// chains' sum in *sink so that none is optimised away. Chains covers latency x issue width: 4-cycle FMAs
// on 2 ports need 8 in flight; 10 (AVX2, of 16 registers) and 24 (AVX-512, of 32) leave room for 5-cycle
// FMAs or 3 ports. Each step's loop over the chains is unrolled, so that they live in registers: rolled, GCC
// kept the 24 AVX-512 chains on the stack, a load, an FMA and a store per step, and measured half the peak
// (a fp32 GEMM then ran at 1.5x "the peak").

using Vec4 = float __attribute__((vector_size(16)));

double portable_chains(int64_t iterations, float* sink) {
    constexpr int kChains = 12;
    Vec4 acc[kChains];  // [kChains] independent chains, in registers
    for (int c = 0; c < kChains; ++c) acc[c] = Vec4{} + static_cast<float>(c);
    const Vec4 m = Vec4{} + kMultiplier, a = Vec4{} + kAddend;
    for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 32
        for (Vec4& x : acc) x = x * m + a;
    }
    Vec4 sum = {};
    for (const Vec4& x : acc) sum += x;
    *sink = sum[0] + sum[1] + sum[2] + sum[3];
    return 2.0 * 4 * kChains * static_cast<double>(iterations);
}

#ifdef KVX_FMA_X86
__attribute__((target("avx2,fma"))) double avx2_chains(int64_t iterations, float* sink) {
    constexpr int kChains = 10;
    __m256 acc[kChains];  // [kChains] independent chains, in registers
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(static_cast<float>(c));
    const __m256 m = _mm256_set1_ps(kMultiplier), a = _mm256_set1_ps(kAddend);
    for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 32
        for (__m256& x : acc) x = _mm256_fmadd_ps(x, m, a);
    }
    __m256 sum = _mm256_setzero_ps();
    for (const __m256& x : acc) sum = _mm256_add_ps(sum, x);
    *sink = _mm256_cvtss_f32(sum);
    return 2.0 * 8 * kChains * static_cast<double>(iterations);
}

__attribute__((target("avx512f"))) double avx512_chains(int64_t iterations, float* sink) {
    constexpr int kChains = 24;
    __m512 acc[kChains];  // [kChains] independent chains, in registers
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c));
    const __m512 m = _mm512_set1_ps(kMultiplier), a = _mm512_set1_ps(kAddend);
    for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 32
        for (__m512& x : acc) x = _mm512_fmadd_ps(x, m, a);
    }
    __m512 sum = _mm512_setzero_ps();
    for (const __m512& x : acc) sum = _mm512_add_ps(sum, x);
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, sum);
    *sink = lanes[0];
    return 2.0 * 16 * kChains * static_cast<double>(iterations);
}

// x = maddubs(x, m): each step's product depends on the previous one, so nothing can be hoisted; the int16
// results wrap and saturate freely, only their being computed matters.
__attribute__((target("avx2"))) double avx2_int8_chains(int64_t iterations, float* sink) {
    constexpr int kChains = 10;
    __m256i acc[kChains];  // [kChains] independent chains, in registers
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_epi8(static_cast<char>(c + 1));
    const __m256i m = _mm256_set1_epi8(3);
    for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 32
        for (__m256i& x : acc) x = _mm256_maddubs_epi16(x, m);
    }
    __m256i sum = _mm256_setzero_si256();
    for (const __m256i& x : acc) sum = _mm256_add_epi16(sum, x);
    *sink = static_cast<float>(_mm256_extract_epi16(sum, 0));
    return 2.0 * 32 * kChains * static_cast<double>(iterations);
}

__attribute__((target("avx512f,avx512bw"))) double avx512_int8_chains(int64_t iterations, float* sink) {
    constexpr int kChains = 24;
    __m512i acc[kChains];  // [kChains] independent chains, in registers
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_epi8(static_cast<char>(c + 1));
    const __m512i m = _mm512_set1_epi8(3);
    for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 32
        for (__m512i& x : acc) x = _mm512_maddubs_epi16(x, m);
    }
    __m512i sum = _mm512_setzero_si512();
    for (const __m512i& x : acc) sum = _mm512_add_epi16(sum, x);
    alignas(64) int16_t lanes[32];
    _mm512_store_si512(lanes, sum);
    *sink = static_cast<float>(lanes[0]);
    return 2.0 * 64 * kChains * static_cast<double>(iterations);
}

// x = dpbusd(x, m, m): the VNNI level's product, 64 byte multiply-adds into 16 int32 lanes per instruction.
__attribute__((target("avx512f,avx512bw,avx512vnni"))) double avx512_vnni_int8_chains(int64_t iterations, float* sink) {
    constexpr int kChains = 24;
    __m512i acc[kChains];  // [kChains] independent chains, in registers
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_epi32(c + 1);
    const __m512i m = _mm512_set1_epi8(3);
    for (int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 32
        for (__m512i& x : acc) x = _mm512_dpbusd_epi32(x, m, m);
    }
    __m512i sum = _mm512_setzero_si512();
    for (const __m512i& x : acc) sum = _mm512_add_epi32(sum, x);
    alignas(64) int32_t lanes[16];
    _mm512_store_si512(lanes, sum);
    *sink = static_cast<float>(lanes[0]);
    return 2.0 * 64 * kChains * static_cast<double>(iterations);
}
#endif

double run_chains(cpu::SimdLevel level, int64_t iterations, float* sink) {
#ifdef KVX_FMA_X86
    if (level == cpu::SimdLevel::avx512 || level == cpu::SimdLevel::avx512_vnni) return avx512_chains(iterations, sink);
    if (level == cpu::SimdLevel::avx2) return avx2_chains(iterations, sink);
#endif
    (void)level;
    return portable_chains(iterations, sink);
}

double run_int8_chains(cpu::SimdLevel level, int64_t iterations, float* sink) {
#ifdef KVX_FMA_X86
    if (level == cpu::SimdLevel::avx512_vnni) return avx512_vnni_int8_chains(iterations, sink);
    if (level == cpu::SimdLevel::avx512) return avx512_int8_chains(iterations, sink);
    if (level == cpu::SimdLevel::avx2) return avx2_int8_chains(iterations, sink);
#endif
    (void)level;
    (void)iterations;
    *sink = 0;
    return 0;
}

// The best over `passes` of the chains' rate in G per second on `threads` threads. The best, not the median:
// a ceiling no kernel can pass. On a shared 2-core machine the median of 11 passes was as low as 60% of the
// best, and a fp32 GEMM measured 1.1-1.5x "the peak".
template <class Chains>
double measure_chains(cpu::SimdLevel level, int threads, int passes, int64_t iterations, Chains chains) {
    cpu::cpu_kernels(level);  // throws, naming the level, if this machine cannot run it
    std::vector<double> gflops;
    std::vector<float> observed;  // every thread's chain results, kept so the compiler must compute them
    for (int pass = -1; pass < passes; ++pass) {  // pass -1 wakes the thread team and is not counted
        const auto start = std::chrono::steady_clock::now();
        double flops = 0;
        observed.assign(static_cast<size_t>(threads), 0.0f);
#pragma omp parallel num_threads(threads) reduction(+ : flops)
        flops += chains(level, iterations, &observed[static_cast<size_t>(omp_get_thread_num())]);
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (pass >= 0) gflops.push_back(flops / seconds / 1e9);
        // Using the results keeps the chains from being optimised away; converging, they must be finite.
        for (float v : observed)
            if (!std::isfinite(v)) throw std::runtime_error("peak FMA: the chains' results are not finite");
    }
    return *std::max_element(gflops.begin(), gflops.end());
}

}  // namespace

double measure_peak_fma_gflops(cpu::SimdLevel level, int threads, int passes, int64_t iterations) {
    return measure_chains(level, threads, passes, iterations, run_chains);
}

double measure_peak_int8_gops(cpu::SimdLevel level, int threads, int passes, int64_t iterations) {
    return measure_chains(level, threads, passes, iterations, run_int8_chains);
}

}  // namespace kvx::bench
