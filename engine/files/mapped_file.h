// A read-only memory map of a whole file: weights are used in place, or copied once by a backend that reads
// them faster elsewhere (release_pages).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kvx {

class MappedFile {
public:
    explicit MappedFile(const std::string& path);  // throws kvx::Error naming the path and the reason
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const uint8_t* data() const { return data_; }
    size_t size() const { return size_; }
    const std::string& path() const { return path_; }
    // Gives the system back the pages that lie wholly inside [p, p + bytes), a range of this mapping (else
    // nothing happens): a backend that copied the bytes calls it, so the process does not hold them twice. The
    // mapping is read-only, so nothing is lost: a later read of the range maps the file's pages again.
    void release_pages(const void* p, size_t bytes) const;

private:
    std::string path_;
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
};

}  // namespace kvx
