// Device and pinned memory on the host, and the copies between them. Device memory is 256-byte aligned host
// memory of the exact size (ASan sees one byte past the end), kept in a registry so that every copy can check
// that its device side is device memory and its host side is not: a swapped pair of pointers, a wrong
// cudaMemcpyKind or a copy past an allocation's end aborts here, where on a GPU it would fault or corrupt.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <iterator>
#include <set>
#include <string>

#include "tools/cuda_emulation/emu_device.h"
#include "tools/cuda_emulation/emu_runtime.h"

namespace {

struct Registry {
    std::mutex mutex;
    std::map<uintptr_t, size_t> device;  // start -> bytes
    std::set<void*> pinned;
};

Registry& registry() {
    static Registry r;
    return r;
}

// The allocation holding address a, or end().
std::map<uintptr_t, size_t>::const_iterator holding(const std::map<uintptr_t, size_t>& device, uintptr_t a) {
    auto it = device.upper_bound(a);
    if (it == device.begin()) return device.end();
    --it;
    return a < it->first + it->second ? it : device.end();
}

std::string describe(const void* p, size_t bytes) {
    char text[64];
    std::snprintf(text, sizeof text, "%p (%zu bytes)", p, bytes);
    return text;
}

// Where cudaMemcpyKind says the source and the destination are.
void check_kind(void* dst, const void* src, size_t n, cudaMemcpyKind kind, const char* what) {
    const std::string name(what);
    switch (kind) {
    case cudaMemcpyHostToDevice:
        emu_require_device(dst, n, (name + " host-to-device destination").c_str());
        emu_require_host(src, n, (name + " host-to-device source").c_str());
        break;
    case cudaMemcpyDeviceToHost:
        emu_require_device(src, n, (name + " device-to-host source").c_str());
        emu_require_host(dst, n, (name + " device-to-host destination").c_str());
        break;
    case cudaMemcpyDeviceToDevice:
        emu_require_device(src, n, (name + " device-to-device source").c_str());
        emu_require_device(dst, n, (name + " device-to-device destination").c_str());
        break;
    case cudaMemcpyHostToHost:
        emu_require_host(src, n, (name + " host-to-host source").c_str());
        emu_require_host(dst, n, (name + " host-to-host destination").c_str());
        break;
    case cudaMemcpyDefault:
        break;
    }
}

}  // namespace

bool emu_is_device(const void* p, size_t bytes) {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    const auto a = reinterpret_cast<uintptr_t>(p);
    const auto it = holding(r.device, a);
    return it != r.device.end() && a + bytes <= it->first + it->second;
}

// An empty range is no access: CUDA accepts any pointer with a zero size.
void emu_require_device(const void* p, size_t bytes, const char* what) {
    if (bytes != 0 && !emu_is_device(p, bytes))
        emu_fail((std::string(what) + ": " + describe(p, bytes) + " is not inside one device allocation").c_str());
}

void emu_require_host(const void* p, size_t bytes, const char* what) {
    if (bytes == 0) return;
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    const auto a = reinterpret_cast<uintptr_t>(p);
    // The last allocation starting at or before the range's last byte is the only one that can overlap it.
    auto it = r.device.upper_bound(a + bytes - 1);
    if (it != r.device.begin() && std::prev(it)->first + std::prev(it)->second > a)
        emu_fail((std::string(what) + ": " + describe(p, bytes) + " is device memory, a host pointer was expected").c_str());
}

extern "C" {

cudaError_t cudaMalloc(void** p, size_t n) {
    *p = nullptr;
    if (posix_memalign(p, 256, n ? n : 1) != 0) return cudaErrorMemoryAllocation;
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    r.device[reinterpret_cast<uintptr_t>(*p)] = n;
    return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
    if (!p) return cudaSuccess;
    {
        Registry& r = registry();
        std::lock_guard lock(r.mutex);
        if (r.device.erase(reinterpret_cast<uintptr_t>(p)) != 1) emu_fail("cudaFree of a pointer cudaMalloc did not return");
    }
    std::free(p);
    return cudaSuccess;
}

// Pinned memory is ordinary host memory; the registry only lets cudaFreeHost refuse what it did not allocate.
cudaError_t cudaMallocHost(void** p, size_t n) {
    *p = std::malloc(n ? n : 1);
    if (!*p) return cudaErrorMemoryAllocation;
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    r.pinned.insert(*p);
    return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** p, size_t n, unsigned int) { return cudaMallocHost(p, n); }

cudaError_t cudaFreeHost(void* p) {
    if (!p) return cudaSuccess;
    {
        Registry& r = registry();
        std::lock_guard lock(r.mutex);
        if (r.pinned.erase(p) != 1) emu_fail("cudaFreeHost of a pointer cudaMallocHost did not return");
    }
    std::free(p);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
    check_kind(dst, src, n, kind, "cudaMemcpy");
    if (n) std::memmove(dst, src, n);
    return cudaSuccess;
}

cudaError_t cudaMemset(void* dst, int value, size_t n) {
    emu_require_device(dst, n, "cudaMemset");
    if (n) std::memset(dst, value, n);
    return cudaSuccess;
}

// The check is at the call (where a GPU reports a bad argument); the copy itself runs in stream order, so a
// captured copy copies again, from the same addresses, at every replay.
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t stream) {
    check_kind(dst, src, n, kind, "cudaMemcpyAsync");
    return emu_enqueue(stream, [=] {
        if (n) std::memmove(dst, src, n);
    });
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t n, cudaStream_t stream) {
    emu_require_device(dst, n, "cudaMemsetAsync");
    return emu_enqueue(stream, [=] {
        if (n) std::memset(dst, value, n);
    });
}

}  // extern "C"
