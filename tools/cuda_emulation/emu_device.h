// What emulated device code calls: the thread's indices, the block's dynamic shared memory, __syncthreads,
// warp shuffles, __ldg, atomics; and the two host entry points emu.h's templates forward to. The fiber
// scheduler behind them is fibers.cpp.
#pragma once
#include <cuda_runtime_api.h>
#include <vector_types.h>
#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>

struct EmuIdx { unsigned x = 0, y = 0, z = 0; };
// Set by the scheduler before it switches to a thread's fiber.
inline thread_local EmuIdx threadIdx, blockIdx, blockDim, gridDim;

using EmuKernelId = void (*)();

[[noreturn]] void emu_fail(const char* what);

// The running block's dynamic shared memory (poisoned with 0xFF at the start of every block).
unsigned char* emu_smem();
// Waits until every thread of the block that has not returned arrives (a returned thread drops out, as on sm_70+).
void emu_sync_block();
// A full-warp exchange: every lane deposits `bits` and gets lane src_lane's; aborts on a lane that returned.
uint64_t emu_warp_exchange(uint64_t bits, unsigned src_lane);

void emu_launch_erased(EmuKernelId kernel, std::function<void()> body, dim3 grid, dim3 block, size_t smem_bytes,
                       cudaStream_t stream);
cudaError_t emu_func_set_attribute(EmuKernelId kernel, cudaFuncAttribute attribute, int value);
long emu_launch_count();

inline void __syncthreads() { emu_sync_block(); }

template <class T>
T emu_shfl(unsigned mask, T v, int src_lane, int width) {
    static_assert(sizeof(T) <= 8);
    if (mask != 0xffffffffu) emu_fail("shuffle with a partial mask (emulation supports full masks only)");
    if (width != 32) emu_fail("shuffle width != 32");
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    const uint64_t got = emu_warp_exchange(bits, static_cast<unsigned>(src_lane) & 31u);
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
    return emu_shfl(m, v, lane - int(delta) >= 0 ? lane - int(delta) : lane, width);
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
// A block's threads run one at a time on one host thread, so a plain read-modify-write is atomic among them;
// atomic_ref keeps it so should blocks ever run on several host threads.
inline unsigned atomicAdd(unsigned* p, unsigned v) { return std::atomic_ref<unsigned>(*p).fetch_add(v); }
inline int atomicAdd(int* p, int v) { return std::atomic_ref<int>(*p).fetch_add(v); }
inline float atomicAdd(float* p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }
// Rounded arithmetic that nvcc never contracts into an FMA. The emulation is built for baseline x86-64, which
// has no FMA for the host compiler to contract them into either.
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __uint_as_float(unsigned u) { return std::bit_cast<float>(u); }
inline unsigned __float_as_uint(float f) { return std::bit_cast<unsigned>(f); }
using std::max;
using std::min;
using std::isnan;
using std::isinf;
using std::isfinite;
