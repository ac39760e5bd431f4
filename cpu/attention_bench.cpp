// Decode attention speed at one context length: the paged cache (fp32 and fp16, shuffled blocks) against
// the contiguous one (ONNX Runtime GenAI's layout), on the best SIMD level, at 1 and 2 threads. Prints the
// median of repeated calls and the K/V bytes read per second (attention at decode is bandwidth bound).
// Not a test: run by hand, e.g.  build/bin/kvx_attention_bench 4096 16
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "cpu/cpu_kernels.h"
#include "kernels/f16.h"
#include "kernels/kernels.h"

namespace {

constexpr int kSeqs = 4, kHeads = 32, kKvHeads = 8, kHeadDim = 128, kRepeats = 21;

template <class Call>
double median_ms(Call call) {
    std::vector<double> ms;
    call();  // warm-up: first touch, thread team
    for (int i = 0; i < kRepeats; ++i) {
        const auto start = std::chrono::steady_clock::now();
        call();
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    const int context = argc > 1 ? std::atoi(argv[1]) : 4096;
    const int block_size = argc > 2 ? std::atoi(argv[2]) : 16;
    if (context < 1 || block_size < 1) {
        std::fprintf(stderr, "usage: kvx_attention_bench [context >= 1] [block_size >= 1]\n");
        return 1;
    }
    const kvx::KernelTable& kernels = kvx::cpu::cpu_kernels(kvx::cpu::best_simd_level());
    const int blocks_per_seq = (context + block_size - 1) / block_size;
    const int num_blocks = kSeqs * blocks_per_seq;
    const size_t row = kHeadDim;
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    auto random_vector = [&](size_t n) {
        std::vector<float> v(n);
        for (float& x : v) x = dist(rng);
        return v;
    };

    // Paged: [num_blocks][kKvHeads][block_size][kHeadDim], sequence s's blocks shuffled over the pool.
    const std::vector<float> k_paged = random_vector(static_cast<size_t>(num_blocks) * kKvHeads * block_size * row);
    const std::vector<float> v_paged = random_vector(k_paged.size());
    std::vector<uint16_t> k_f16(k_paged.size()), v_f16(v_paged.size());
    std::transform(k_paged.begin(), k_paged.end(), k_f16.begin(), kvx::f32_to_f16);
    std::transform(v_paged.begin(), v_paged.end(), v_f16.begin(), kvx::f32_to_f16);
    std::vector<int32_t> tables(static_cast<size_t>(num_blocks));  // [kSeqs][blocks_per_seq]
    std::iota(tables.begin(), tables.end(), 0);
    std::shuffle(tables.begin(), tables.end(), rng);
    // Contiguous: [kSeqs][kKvHeads][context][kHeadDim].
    const std::vector<float> k_contiguous = random_vector(static_cast<size_t>(kSeqs) * kKvHeads * context * row);
    const std::vector<float> v_contiguous = random_vector(k_contiguous.size());

    const std::vector<float> q = random_vector(static_cast<size_t>(kSeqs) * kHeads * row);  // [kSeqs][kHeads][kHeadDim]
    std::vector<float> out(q.size());
    std::vector<int32_t> row_seq(kSeqs), row_pos(kSeqs, context - 1);
    std::iota(row_seq.begin(), row_seq.end(), 0);

    kvx::PagedAttentionArgs paged;
    paged.q = q.data();
    paged.block_tables = tables.data();
    paged.row_seq = row_seq.data();
    paged.row_pos = row_pos.data();
    paged.out = out.data();
    paged.n_rows = kSeqs;
    paged.n_heads = kHeads;
    paged.n_kv_heads = kKvHeads;
    paged.head_dim = kHeadDim;
    paged.block_size = block_size;
    paged.table_stride = blocks_per_seq;
    paged.scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
    kvx::ContiguousAttentionArgs contiguous;
    contiguous.q = q.data();
    contiguous.k_cache = k_contiguous.data();
    contiguous.v_cache = v_contiguous.data();
    contiguous.row_seq = row_seq.data();
    contiguous.row_pos = row_pos.data();
    contiguous.out = out.data();
    contiguous.n_rows = kSeqs;
    contiguous.n_heads = kHeads;
    contiguous.n_kv_heads = kKvHeads;
    contiguous.head_dim = kHeadDim;
    contiguous.max_seq = context;
    contiguous.scale = paged.scale;

    // K and V of every visible position of every sequence, read once per call (GQA heads share a KV row).
    const double kv_bytes_f32 = 2.0 * kSeqs * kKvHeads * context * kHeadDim * sizeof(float);
    std::printf("%s, %d sequences x %d context, %d heads / %d kv heads x %d, block size %d, median of %d\n",
                kernels.name, kSeqs, context, kHeads, kKvHeads, kHeadDim, block_size, kRepeats);
    for (int threads : {1, 2}) {
        omp_set_num_threads(threads);
        const double ms_contiguous = median_ms([&] { kernels.contiguous_attention(contiguous); });
        paged.k_cache = k_paged.data();
        paged.v_cache = v_paged.data();
        paged.kv_dtype = kvx::KvDtype::f32;
        const double ms_paged = median_ms([&] { kernels.paged_attention(paged); });
        paged.k_cache = k_f16.data();
        paged.v_cache = v_f16.data();
        paged.kv_dtype = kvx::KvDtype::f16;
        const double ms_f16 = median_ms([&] { kernels.paged_attention(paged); });
        auto gbps = [](double bytes, double ms) { return bytes / ms / 1e6; };
        std::printf("threads %d  contiguous f32 %8.3f ms %6.1f GB/s | paged f32 %8.3f ms %6.1f GB/s | "
                    "paged f16 %8.3f ms %6.1f GB/s\n",
                    threads, ms_contiguous, gbps(kv_bytes_f32, ms_contiguous), ms_paged, gbps(kv_bytes_f32, ms_paged),
                    ms_f16, gbps(kv_bytes_f32 / 2, ms_f16));
    }
    return 0;
}
