#include "engine/files/mapped_file.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

#include "engine/files/regular_file.h"
#include "kernels/error.h"

namespace kvx {

MappedFile::MappedFile(const std::string& path) : path_(path) {
    const RegularFile file(path, "file");  // closed on return: the mapping keeps the file alive
    size_ = file.size();
    if (size_ > 0) {
        void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, file.fd(), 0);
        if (p == MAP_FAILED) throw Error("cannot map '" + path + "': " + std::strerror(errno));
        data_ = static_cast<const uint8_t*>(p);
    }
}

void MappedFile::release_pages(const void* p, size_t bytes) const {
    const auto* begin = static_cast<const uint8_t*>(p);
    if (!data_ || begin < data_ || bytes > size_ || begin - data_ > static_cast<ptrdiff_t>(size_ - bytes)) return;
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const uintptr_t first = (reinterpret_cast<uintptr_t>(begin) + page - 1) / page * page;
    const uintptr_t last = (reinterpret_cast<uintptr_t>(begin) + bytes) / page * page;
    if (first < last) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);  // advice: may be ignored
}

MappedFile::~MappedFile() {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace kvx
