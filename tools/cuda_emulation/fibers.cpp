// The block scheduler: a block's threads are fibers on the launching host thread, each run until it
// waits (__syncthreads, a shuffle) or returns, then the next; a barrier opens when every thread that has not
// returned waits at it, a warp's exchange when all 32 lanes have deposited. One host thread instead of one
// per CUDA thread: the earlier design spent its time handing cores between threads in futex barriers.
// ASan is told of every switch (__sanitizer_*_switch_fiber), so it checks fiber stacks as thread stacks.
// The switch is a few instructions of x86-64 assembly: ucontext's swapcontext makes a system call per switch
// (the signal mask), which took half the emulation's time.
#include "tools/cuda_emulation/fibers.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tools/cuda_emulation/emu_device.h"

// KVX_EMU_FIBERS_TELL_ASAN: this file is compiled without ASan's instrumentation in the sanitizer build
// (CMakeLists.txt), but the program has ASan, which must still learn of every stack switch.
#if defined(__SANITIZE_ADDRESS__) || defined(KVX_EMU_FIBERS_TELL_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define KVX_EMU_ASAN 1
#endif

void emu_fail(const char* what) {
    std::fprintf(stderr, "EMU FAILURE: %s\n", what);
    std::fflush(stderr);
    std::abort();
}

#if !defined(__x86_64__)
#error "the CUDA emulation's fiber switch is written for x86-64 (System V ABI): port kvx_emu_switch"
#endif

// kvx_emu_switch(&from_sp, to_sp): pushes the callee-saved registers on the current stack, stores the stack
// pointer in *from_sp, and pops the same from to_sp's stack. The SSE and x87 control words are not switched:
// every fiber runs with the host thread's, which no kernel changes.
extern "C" void kvx_emu_switch(void** from_sp, void* to_sp);
asm(R"(
    .pushsection .text
    .globl kvx_emu_switch
    .type kvx_emu_switch, @function
kvx_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size kvx_emu_switch, .-kvx_emu_switch
    .popsection
)");

namespace {

// Kernels keep small arrays in registers; on the host they are stack. ASan's redzones need the room.
constexpr size_t kStackBytes = size_t{256} << 10;
constexpr size_t kGuardBytes = 4096;  // an inaccessible page under each stack: an overflow faults
constexpr size_t kLiveFramesBytes = 16 << 10;  // more than fiber_main's and leave's frames under ASan
constexpr unsigned kHost = ~0u;       // next_to_run's answer when the block is over

enum class Wait : unsigned char { none, block, warp, done };

struct Fiber {
    void* sp = nullptr;              // the saved stack pointer while switched away
    unsigned char* stack = nullptr;  // kStackBytes above a guard page, kept for the next blocks
    Wait wait = Wait::none;
    void* fake_stack = nullptr;  // ASan's fake stack while switched away
};

struct Block {
    const std::function<void()>* body = nullptr;
    unsigned threads = 0;
    std::vector<Fiber> fibers;
    std::vector<uint64_t> deposited, published;  // [threads] a shuffle's values as lanes arrive; as read
    std::vector<unsigned> warp_waiting, warp_returned;
    unsigned at_barrier = 0, returned = 0, current = 0;
    std::vector<unsigned char> smem;
    void* host_sp = nullptr;  // the launching host code, resumed when every thread has returned
    const void* host_bottom = nullptr;
    size_t host_size = 0;
};

thread_local Block* running = nullptr;  // the block being run on this host thread
thread_local long launches = 0;

Block& current_block(const char* what) {
    if (!running) emu_fail((std::string(what) + " outside a kernel").c_str());
    return *running;
}

unsigned char* new_stack() {
    void* p = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) emu_fail("cannot map a fiber stack");
    if (mprotect(p, kGuardBytes, PROT_NONE) != 0) emu_fail("cannot protect a fiber stack's guard page");
    return static_cast<unsigned char*>(p) + kGuardBytes;
}

// Opens the waits that are complete; returns whether any was.
bool release(Block& b) {
    bool released = false;
    for (unsigned w = 0; w < b.warp_waiting.size(); ++w) {
        if (b.warp_waiting[w] == 0) continue;
        const unsigned lanes = std::min(32u, b.threads - 32 * w);
        if (b.warp_waiting[w] + b.warp_returned[w] == lanes && b.warp_returned[w] != 0)
            emu_fail("full-mask shuffle after some lanes of the warp returned");
        if (b.warp_waiting[w] != lanes) continue;
        std::copy_n(b.deposited.begin() + 32 * w, lanes, b.published.begin() + 32 * w);
        for (unsigned t = 32 * w; t < 32 * w + lanes; ++t) b.fibers[t].wait = Wait::none;
        b.warp_waiting[w] = 0;
        released = true;
    }
    if (b.at_barrier != 0 && b.at_barrier == b.threads - b.returned) {
        for (Fiber& f : b.fibers)
            if (f.wait == Wait::block) f.wait = Wait::none;
        b.at_barrier = 0;
        released = true;
    }
    return released;
}

// Apart from the switch path, whose frame (switched through at every wait) it would make large.
[[noreturn, gnu::noinline, gnu::cold]] void deadlock(const Block& b) {
    const std::string what = "deadlock: of " + std::to_string(b.threads - b.returned) + " threads still running, " +
                             std::to_string(b.at_barrier) +
                             " wait at __syncthreads and the others at a shuffle their warp never completes";
    emu_fail(what.c_str());
}

// The thread to run after the current one waits or returns: the next runnable one in this pass over the block;
// at the end of a pass, after opening the waits that are complete, the first runnable one; kHost when every
// thread has returned. Threads run in a fixed order, each as far as it can.
unsigned next_to_run(Block& b) {
    for (unsigned t = b.current + 1; t < b.threads; ++t)
        if (b.fibers[t].wait == Wait::none) return t;
    release(b);
    for (unsigned t = 0; t < b.threads; ++t)
        if (b.fibers[t].wait == Wait::none) return t;
    if (b.returned == b.threads) return kHost;
    deadlock(b);
}

// Switches from thread `from` (waiting, or returned: then it is never resumed) straight to the next thread
// to run, or to the host. One switch per hop: going through a scheduler would take two.
void leave(Block& b, unsigned from, bool returned) {
    const unsigned to = next_to_run(b);
    if (to == from) return;  // the only thread that can run is this one (its wait opened at once)
    void* finished_sp = nullptr;
    void** save = returned ? &finished_sp : &b.fibers[from].sp;
#ifdef KVX_EMU_ASAN
    void** fake = returned ? nullptr : &b.fibers[from].fake_stack;  // null: this fiber is over
#endif
    if (to == kHost) {
#ifdef KVX_EMU_ASAN
        __sanitizer_start_switch_fiber(fake, b.host_bottom, b.host_size);
#endif
        kvx_emu_switch(save, b.host_sp);
    } else {
        b.current = to;
        threadIdx = {to, 0, 0};
#ifdef KVX_EMU_ASAN
        __sanitizer_start_switch_fiber(fake, b.fibers[to].stack, kStackBytes);
#endif
        kvx_emu_switch(save, b.fibers[to].sp);
    }
#ifdef KVX_EMU_ASAN
    __sanitizer_finish_switch_fiber(b.fibers[from].fake_stack, nullptr, nullptr);
#endif
}

void wait_in_fiber(Wait wait) {
    Block& b = *running;
    const unsigned self = b.current;
    b.fibers[self].wait = wait;
    leave(b, self, false);
}

[[noreturn]] void fiber_main() {
    Block& b = *running;
#ifdef KVX_EMU_ASAN
    // Every fiber starts from the previous one but fiber 0, which the host starts: the host's stack is learned there.
    const void* from_bottom = nullptr;
    size_t from_size = 0;
    __sanitizer_finish_switch_fiber(nullptr, &from_bottom, &from_size);
    if (b.current == 0) {
        b.host_bottom = from_bottom;
        b.host_size = from_size;
    }
#endif
    (*b.body)();
    const unsigned t = b.current;
    b.fibers[t].wait = Wait::done;
    ++b.returned;
    ++b.warp_returned[t / 32];
    leave(b, t, true);
    __builtin_unreachable();
}

// A fresh start of fiber_main on f's stack: the frame kvx_emu_switch pops, returning into fiber_main with the
// stack aligned as after a call (rsp % 16 == 8), under a null return address it never uses.
void prepare(Fiber& f) {
    if (!f.stack) f.stack = new_stack();
#ifdef KVX_EMU_ASAN
    // The previous fiber on this stack left it by a switch, never returning from fiber_main's and leave's
    // frames, whose redzones stay poisoned; every deeper frame had returned. Their top of the stack only:
    // unpoisoning all 256 KiB per thread per block took half the run time.
    __asan_unpoison_memory_region(f.stack + kStackBytes - kLiveFramesBytes, kLiveFramesBytes);
#endif
    auto* sp = reinterpret_cast<uint64_t*>(f.stack + kStackBytes);
    *--sp = 0;                                        // fiber_main's return address
    *--sp = reinterpret_cast<uint64_t>(&fiber_main);  // kvx_emu_switch's
    for (int r = 0; r < 6; ++r) *--sp = 0;            // rbp rbx r12 r13 r14 r15
    f.sp = sp;
    f.wait = Wait::none;
    f.fake_stack = nullptr;
}

void run_block(Block& b) {
    for (unsigned t = 0; t < b.threads; ++t) prepare(b.fibers[t]);
    std::fill(b.warp_waiting.begin(), b.warp_waiting.end(), 0u);
    std::fill(b.warp_returned.begin(), b.warp_returned.end(), 0u);
    b.at_barrier = b.returned = 0;
    b.current = 0;
    threadIdx = {0, 0, 0};
#ifdef KVX_EMU_ASAN
    void* host_fake_stack = nullptr;
    __sanitizer_start_switch_fiber(&host_fake_stack, b.fibers[0].stack, kStackBytes);
#endif
    kvx_emu_switch(&b.host_sp, b.fibers[0].sp);  // back when every thread has returned
#ifdef KVX_EMU_ASAN
    __sanitizer_finish_switch_fiber(host_fake_stack, nullptr, nullptr);
#endif
}

}  // namespace

unsigned char* emu_smem() { return current_block("dynamic shared memory").smem.data(); }

void emu_sync_block() {
    Block& b = current_block("__syncthreads");
    ++b.at_barrier;
    wait_in_fiber(Wait::block);
}

uint64_t emu_warp_exchange(uint64_t bits, unsigned src_lane) {
    Block& b = current_block("a warp shuffle");
    if (b.threads % 32 != 0) emu_fail("shuffle in a block that is not whole warps");
    const unsigned t = b.current, warp = t / 32;
    b.deposited[t] = bits;
    ++b.warp_waiting[warp];
    wait_in_fiber(Wait::warp);
    return b.published[32 * warp + src_lane];
}

long emu_launch_count() { return launches; }

void emu_run_grid(const std::function<void()>& body, dim3 grid, dim3 block, size_t smem_bytes) {
    if (running) emu_fail("a kernel launched from inside a kernel");
    static thread_local Block b;
    b.body = &body;
    b.threads = block.x;
    if (b.fibers.size() < block.x) b.fibers.resize(block.x);
    b.deposited.assign(block.x, 0);
    b.published.assign(block.x, 0);
    b.warp_waiting.assign((block.x + 31) / 32, 0);
    b.warp_returned.assign((block.x + 31) / 32, 0);
    ++launches;
    running = &b;
    blockDim = {block.x, 1, 1};
    gridDim = {grid.x, grid.y, grid.z};
    for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x) {
                blockIdx = {x, y, z};
                b.smem = std::vector<unsigned char>(smem_bytes, 0xFF);  // a fresh exact-size buffer: ASan sees a byte past the end
                run_block(b);
            }
    running = nullptr;
    threadIdx = blockIdx = blockDim = gridDim = EmuIdx{};
}
