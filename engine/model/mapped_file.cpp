#include "engine/model/mapped_file.h"

#include <cerrno>
#include <cstring>
#include <sys/mman.h>

#include "engine/model/regular_file.h"
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

MappedFile::~MappedFile() {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace kvx
