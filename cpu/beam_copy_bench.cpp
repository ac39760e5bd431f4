// What one beam-search step costs in KV copies: the paged cache's copy-on-write pairs (one copy_blocks call
// per layer: a forked beam's partly filled last block) against the physical reorder of a contiguous cache
// per beam (reorder_beams per layer: every beam's whole history, ONNX Runtime GenAI's design). Prints the
// median time of a step and the bytes it copies. Not a test: run by hand with a model's shape and the copies
// per step that `kvx generate --beams` reports, e.g. SmolLM2-135M, 8 beams at 192 tokens, 8 copies per step:
//   build/bin/kvx_beam_copy_bench 30 3 64 8 192 16 8
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cpu/cpu_kernels.h"
#include "kernels/kernels.h"

namespace {

constexpr int kRepeats = 31;

// Median milliseconds of kRepeats calls of step(), after one call that touches every page.
template <class Step>
double median_step_ms(Step step) {
    step();
    std::vector<double> ms(kRepeats);
    for (double& m : ms) {
        const auto start = std::chrono::steady_clock::now();
        step();
        m = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    }
    std::nth_element(ms.begin(), ms.begin() + kRepeats / 2, ms.end());
    return ms[kRepeats / 2];
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 8) {
        std::fprintf(stderr, "usage: kvx_beam_copy_bench LAYERS KV_HEADS HEAD_DIM BEAMS CONTEXT BLOCK_SIZE COPIES\n");
        return 1;
    }
    int v[7];
    for (int i = 0; i < 7; ++i) v[i] = std::atoi(argv[i + 1]);
    const int layers = v[0], kv_heads = v[1], head_dim = v[2], beams = v[3], context = v[4], block_size = v[5],
              copies = v[6];
    if (layers < 1 || kv_heads < 1 || head_dim < 1 || beams < 1 || beams > 64 || context < 1 || block_size < 1 ||
        copies < 0 || copies > beams) {
        std::fprintf(stderr, "kvx_beam_copy_bench: every size >= 1, BEAMS <= 64, 0 <= COPIES <= BEAMS\n");
        return 1;
    }
    const kvx::KernelTable& kernels = kvx::cpu::cpu_kernels(kvx::cpu::best_simd_level());

    // Paged, per layer: k, v [num_blocks][kv_heads][block_size][head_dim]; a step copies `copies` blocks.
    const int64_t block_elems = int64_t{kv_heads} * block_size * head_dim;
    const int blocks_per_beam = (context + block_size - 1) / block_size;
    const int num_blocks = beams * blocks_per_beam + copies;
    std::vector<std::vector<float>> k_paged(static_cast<size_t>(layers)), v_paged(static_cast<size_t>(layers));
    for (int l = 0; l < layers; ++l) {
        k_paged[static_cast<size_t>(l)].assign(static_cast<size_t>(num_blocks * block_elems), 1.0f);
        v_paged[static_cast<size_t>(l)].assign(static_cast<size_t>(num_blocks * block_elems), 2.0f);
    }
    std::vector<kvx::BlockCopy> pairs;  // [copies]: a beam's last block onto a fresh one
    for (int i = 0; i < copies; ++i) pairs.push_back({(i + 1) * blocks_per_beam - 1, beams * blocks_per_beam + i});

    // Contiguous, per layer: old and new k, v [beams][kv_heads][context][head_dim], swapped after each step.
    const int64_t beam_elems = int64_t{kv_heads} * context * head_dim;
    const size_t cache_elems = static_cast<size_t>(beams * beam_elems);
    std::vector<std::vector<float>> k_old(static_cast<size_t>(layers), std::vector<float>(cache_elems, 1.0f));
    std::vector<std::vector<float>> v_old(static_cast<size_t>(layers), std::vector<float>(cache_elems, 2.0f));
    std::vector<std::vector<float>> k_new = k_old, v_new = v_old;
    std::vector<int32_t> beam_indices(static_cast<size_t>(beams));  // [beams]: the better half has two children
    for (int i = 0; i < beams; ++i) beam_indices[static_cast<size_t>(i)] = i / 2;

    const double bytes_paged = 2.0 * layers * copies * static_cast<double>(block_elems) * sizeof(float);
    const double bytes_contiguous = 2.0 * layers * beams * static_cast<double>(beam_elems) * sizeof(float);
    std::printf("%s, %d layers x %d kv heads x %d, %d beams at %d tokens, block size %d, %d copies per step, "
                "median of %d steps\n",
                kernels.name, layers, kv_heads, head_dim, beams, context, block_size, copies, kRepeats);
    for (int threads : {1, 2}) {
        omp_set_num_threads(threads);
        const double ms_paged = median_step_ms([&] {
            for (int l = 0; l < layers; ++l)
                kernels.copy_blocks(k_paged[static_cast<size_t>(l)].data(), v_paged[static_cast<size_t>(l)].data(),
                                    pairs.data(), copies, block_elems, sizeof(float));
        });
        const double ms_reorder = median_step_ms([&] {
            for (int l = 0; l < layers; ++l) {
                const size_t i = static_cast<size_t>(l);
                kernels.reorder_beams(k_new[i].data(), v_new[i].data(), k_old[i].data(), v_old[i].data(),
                                      beam_indices.data(), beams, beam_elems, sizeof(float));
                std::swap(k_new[i], k_old[i]);
                std::swap(v_new[i], v_old[i]);
            }
        });
        auto gbps = [](double bytes, double ms) { return ms > 0 ? bytes / ms / 1e6 : 0.0; };
        std::printf("threads %d  paged copy-on-write %9.4f ms %10.0f bytes %6.1f GB/s | reorder %9.4f ms %10.0f bytes "
                    "%6.1f GB/s | %.0fx\n",
                    threads, ms_paged, bytes_paged, gbps(bytes_paged, ms_paged), ms_reorder, bytes_contiguous,
                    gbps(bytes_contiguous, ms_reorder), ms_paged > 0 ? ms_reorder / ms_paged : 0.0);
    }
    return 0;
}
