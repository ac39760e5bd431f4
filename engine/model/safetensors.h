// Reads a safetensors file (8-byte little-endian header length, JSON header, raw little-endian data)
// through a memory map, checking every tensor's bounds before handing out a pointer.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/files/mapped_file.h"

namespace kvx {

struct TensorView {
    std::string dtype;           // safetensors dtype string, e.g. "F32"
    std::vector<int64_t> shape;  // row-major
    const uint8_t* data = nullptr;
    size_t nbytes = 0;
};

class SafetensorsFile {
public:
    // Throws kvx::Error naming the file and what is wrong: a header longer than the file, JSON that does
    // not parse, an unknown dtype, offsets outside the data section, a byte size that does not match
    // dtype x shape, or two tensors that overlap.
    explicit SafetensorsFile(const std::string& path);

    bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
    // The named tensor, checked to be F32 (or F16) with the expected shape; throws kvx::Error otherwise.
    const float* f32(const std::string& name, const std::vector<int64_t>& expected_shape) const;
    const uint16_t* f16(const std::string& name, const std::vector<int64_t>& expected_shape) const;
    // The named tensor, checked to have this safetensors dtype ("I8", "U8", ...) and shape.
    const TensorView& tensor(const std::string& name, const char* dtype, const std::vector<int64_t>& expected_shape) const;
    const std::map<std::string, TensorView>& tensors() const { return tensors_; }
    const std::string& path() const { return file_->path(); }
    // MappedFile::release_pages of the file's mapping: for a backend that copied a tensor.
    void release_pages(const void* p, size_t bytes) const { file_->release_pages(p, bytes); }

private:
    std::unique_ptr<MappedFile> file_;
    std::map<std::string, TensorView> tensors_;
};

}  // namespace kvx
