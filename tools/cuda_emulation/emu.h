// CPU emulation of the CUDA device features kvx's kernels use, for running cuda/kernels/*.cu under ASan/UBSan
// on a machine without a GPU. One host thread per CUDA thread (from a persistent pool), std::barrier for
// __syncthreads, a per-warp exchange + barrier for shuffles, std::atomic_ref for atomics. Blocks run one at a
// time, so `__shared__` variables become function statics (one block's worth of storage). tools/cuda_emulation/README.md.
#pragma once
#include <cuda_runtime_api.h>
#include <vector_functions.h>
#include <cuda_fp16.h>
#include <algorithm>
#include <atomic>
#include <barrier>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <semaphore>
#include <thread>
#include <vector>
#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __forceinline__
#undef __launch_bounds__
#undef __align__
#undef __restrict__
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(x) alignas(x)
#define __restrict__

[[noreturn]] inline void emu_fail(const char* what) {
    std::fprintf(stderr, "EMU FAILURE: %s\n", what);
    std::fflush(stderr);
    std::abort();
}

struct EmuIdx { unsigned x = 0, y = 0, z = 0; };
inline thread_local EmuIdx threadIdx, blockIdx, blockDim, gridDim;

struct EmuBlock {
    std::barrier<> bar;
    std::vector<std::unique_ptr<std::barrier<>>> warp_bars;
    std::vector<uint64_t> xchg;                               // one slot per thread, shuffles
    std::unique_ptr<std::atomic<int>[]> warp_exited;          // lanes of each warp that have returned
    std::vector<unsigned char> smem;                          // dynamic shared memory, poisoned
    EmuBlock(unsigned threads, size_t smem_bytes)
        : bar(threads), xchg(threads), warp_exited(new std::atomic<int>[(threads + 31) / 32]), smem(smem_bytes, 0xFF) {
        for (unsigned w = 0; w < (threads + 31) / 32; ++w) {
            const unsigned lanes = std::min(32u, threads - 32 * w);
            warp_bars.push_back(std::make_unique<std::barrier<>>(lanes));
            warp_exited[w] = 0;
        }
    }
};
inline thread_local EmuBlock* emu_block;
inline unsigned char* emu_smem() { return emu_block->smem.data(); }
inline void __syncthreads() { emu_block->bar.arrive_and_wait(); }

// A full-mask shuffle: every lane of the warp must be present (none returned, all at the same call).
template <class T>
T emu_shfl(unsigned mask, T v, int src_lane, int width) {
    static_assert(sizeof(T) <= 8);
    if (mask != 0xffffffffu) emu_fail("shuffle with a partial mask (emulation supports full masks only)");
    if (width != 32) emu_fail("shuffle width != 32");
    const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (blockDim.x % 32 != 0) emu_fail("shuffle in a block that is not whole warps");
    uint64_t* buf = emu_block->xchg.data() + warp * 32;
    auto& bar = *emu_block->warp_bars[warp];
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    buf[lane] = bits;
    bar.arrive_and_wait();
    if (emu_block->warp_exited[warp].load() != 0) emu_fail("full-mask shuffle after some lanes of the warp returned");
    const uint64_t got = buf[static_cast<unsigned>(src_lane) & 31u];
    bar.arrive_and_wait();
    T r;
    std::memcpy(&r, &got, sizeof(T));
    return r;
}
template <class T> T __shfl_sync(unsigned m, T v, int src, int width = 32) { return emu_shfl(m, v, src, width); }
template <class T> T __shfl_xor_sync(unsigned m, T v, int mask, int width = 32) {
    return emu_shfl(m, v, int(threadIdx.x % 32) ^ mask, width);
}
template <class T> T __shfl_up_sync(unsigned m, T v, unsigned delta, int width = 32) {
    const int lane = int(threadIdx.x % 32);
    const T r = emu_shfl(m, v, lane - int(delta) >= 0 ? lane - int(delta) : lane, width);
    return r;
}
template <class T> T __shfl_down_sync(unsigned m, T v, unsigned delta, int width = 32) {
    const int lane = int(threadIdx.x % 32);
    return emu_shfl(m, v, lane + int(delta) < 32 ? lane + int(delta) : lane, width);
}

// A misaligned vector load faults on the GPU; on x86 it would silently work.
template <class T> T __ldg(const T* p) {
    if (reinterpret_cast<uintptr_t>(p) % alignof(T) != 0) emu_fail("__ldg of a misaligned pointer");
    return *p;
}
inline unsigned atomicAdd(unsigned* p, unsigned v) { return std::atomic_ref<unsigned>(*p).fetch_add(v); }
inline int atomicAdd(int* p, int v) { return std::atomic_ref<int>(*p).fetch_add(v); }
inline float atomicAdd(float* p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }
inline float __uint_as_float(unsigned u) { return std::bit_cast<float>(u); }
inline unsigned __float_as_uint(float f) { return std::bit_cast<unsigned>(f); }
template <class F> cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int) { return cudaSuccess; }
using std::max;
using std::min;
using std::isnan;
using std::isinf;
using std::isfinite;

// Persistent workers: worker t runs thread t of the current block.
class EmuPool {
public:
    static EmuPool& get() { static EmuPool p; return p; }
    void run(unsigned n, const std::function<void(unsigned)>& job) {
        while (workers_.size() < n) add_worker();
        job_ = &job;
        remaining_.store(n);
        for (unsigned t = 0; t < n; ++t) workers_[t]->go.release();
        done_.acquire();
    }
private:
    struct Worker { std::binary_semaphore go{0}; std::thread th; };
    void add_worker() {
        auto w = std::make_unique<Worker>();
        const unsigned id = static_cast<unsigned>(workers_.size());
        Worker* raw = w.get();
        w->th = std::thread([this, raw, id] {
            for (;;) {
                raw->go.acquire();
                if (stop_) return;
                (*job_)(id);
                if (remaining_.fetch_sub(1) == 1) done_.release();
            }
        });
        workers_.push_back(std::move(w));
    }
    ~EmuPool() {
        stop_ = true;
        for (auto& w : workers_) w->go.release();
        for (auto& w : workers_) w->th.join();
    }
    std::vector<std::unique_ptr<Worker>> workers_;
    const std::function<void(unsigned)>* job_ = nullptr;
    std::atomic<unsigned> remaining_{0};
    std::binary_semaphore done_{0};
    std::atomic<bool> stop_{false};
};

inline std::atomic<long> emu_launch_count{0};

template <class Body, class G, class B>
void emu_launch(Body body, G grid_arg, B block_arg, size_t smem_bytes = 0, cudaStream_t = nullptr) {
    const dim3 grid(grid_arg), block(block_arg);
    if (block.y != 1 || block.z != 1) emu_fail("2-D/3-D blocks not emulated");
    if (block.x == 0 || block.x > 1024) emu_fail("blockDim.x out of 1 .. 1024");
    if (grid.x == 0 || grid.y == 0 || grid.z == 0) emu_fail("empty grid (cudaErrorInvalidConfiguration)");
    if (grid.x > 2147483647u || grid.y > 65535u || grid.z > 65535u) emu_fail("grid dimension over its limit");
    if (smem_bytes > 227 * 1024) emu_fail("dynamic shared memory over 227 KiB");
    ++emu_launch_count;
    for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x) {
                EmuBlock b(block.x, smem_bytes);
                EmuPool::get().run(block.x, [&](unsigned t) {
                    threadIdx = {t, 0, 0};
                    blockIdx = {x, y, z};
                    blockDim = {block.x, 1, 1};
                    gridDim = {grid.x, grid.y, grid.z};
                    emu_block = &b;
                    body();
                    // A returned thread no longer counts at __syncthreads (as on sm_70+), nor at its warp's shuffles.
                    b.warp_exited[t / 32].fetch_add(1);
                    b.warp_bars[t / 32]->arrive_and_drop();
                    b.bar.arrive_and_drop();
                });
            }
}
