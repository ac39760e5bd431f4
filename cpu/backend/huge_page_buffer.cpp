#include "cpu/backend/huge_page_buffer.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "kernels/error.h"

namespace kvx::cpu {
namespace {

constexpr size_t kHugePageBytes = size_t{2} << 20;

}  // namespace

HugePageBuffer::HugePageBuffer(size_t bytes) : size_(bytes) {
    if (bytes == 0) return;
    // mmap gives page alignment only: map one huge page more and start at the first 2 MiB boundary.
    mapping_bytes_ = bytes + kHugePageBytes;
    void* p = ::mmap(nullptr, mapping_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        throw Error("cannot allocate " + std::to_string(bytes) + " bytes of memory: " + std::strerror(errno));
    mapping_ = p;
    const auto address = reinterpret_cast<uintptr_t>(p);
    data_ = static_cast<uint8_t*>(p) + ((kHugePageBytes - address % kHugePageBytes) % kHugePageBytes);
#ifdef MADV_HUGEPAGE
    ::madvise(data_, bytes, MADV_HUGEPAGE);  // advice: refused (huge pages off, an old kernel) it costs speed only
#endif
}

HugePageBuffer::~HugePageBuffer() {
    if (mapping_) ::munmap(mapping_, mapping_bytes_);
}

HugePageBuffer::HugePageBuffer(HugePageBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapping_(std::exchange(other.mapping_, nullptr)),
      mapping_bytes_(std::exchange(other.mapping_bytes_, 0)) {}

HugePageBuffer& HugePageBuffer::operator=(HugePageBuffer&& other) noexcept {
    if (this != &other) {
        if (mapping_) ::munmap(mapping_, mapping_bytes_);
        data_ = std::exchange(other.data_, nullptr);
        size_ = std::exchange(other.size_, 0);
        mapping_ = std::exchange(other.mapping_, nullptr);
        mapping_bytes_ = std::exchange(other.mapping_bytes_, 0);
    }
    return *this;
}

}  // namespace kvx::cpu
