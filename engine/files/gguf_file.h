// Reads a GGUF file (llama.cpp's model format, versions 2 and 3) through a memory map: its metadata and its
// tensors' names, types, shapes and data, every count, length and offset checked against the file before it
// is used, so a truncated or crafted file is a kvx::Error naming what is wrong, never a read outside it.
//
// Layout (little-endian):
//   "GGUF" u32 version  u64 n_tensors  u64 n_keys
//   n_keys x   { string key, u32 value type, value }          string: u64 length, bytes (no NUL)
//   n_tensors x { string name, u32 n_dims, u64 dims[n_dims] (fastest first), u32 ggml type, u64 offset }
//   padding to general.alignment (32 unless the metadata says otherwise, a power of two)
//   data: each tensor at data start + its offset (a multiple of the alignment)
// An array value is a u32 item type, a u64 count and the items; arrays of arrays are allowed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/files/ggml_type.h"
#include "engine/files/mapped_file.h"

namespace kvx {

enum class GgufValueType : uint32_t {
    u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7, string = 8, array = 9, u64 = 10,
    i64 = 11, f64 = 12,
};
std::string_view gguf_value_type_name(GgufValueType type);  // "u32", "string", "array", ...

// One metadata value; strings and the items of arrays of scalars view the mapping.
struct GgufValue {
    GgufValueType type = GgufValueType::u8;
    // A scalar, widened: integers and bool in `integer` (u64 values above INT64_MAX do not fit: `unsigned_big`),
    // floats in `real`.
    int64_t integer = 0;
    bool unsigned_big = false;
    double real = 0.0;
    std::string_view text;                   // string
    GgufValueType item_type = GgufValueType::u8;  // array
    uint64_t count = 0;                      // array: its length
    const uint8_t* items = nullptr;          // array of scalars: count items of item_type, packed, unaligned
    std::vector<std::string_view> strings;   // array of strings
    std::vector<GgufValue> arrays;           // array of arrays
};

struct GgufTensor {
    std::string name;
    GgmlType type = GgmlType::f32;
    std::vector<int64_t> dims;     // fastest first: a matrix [rows][cols] is {cols, rows}
    const uint8_t* data = nullptr; // inside the mapping, checked: nbytes of it lie in the file
    size_t nbytes = 0;
    int64_t elements() const;
};

class GgufFile {
public:
    // Throws kvx::Error naming the path and the problem (not GGUF, an unknown version, a count or length the
    // file cannot hold, a value type or tensor type kvx does not know, a tensor whose data leaves the file or
    // overlaps another's, a duplicate key or tensor name).
    explicit GgufFile(const std::string& path);

    const std::string& path() const { return file_->path(); }
    uint32_t version() const { return version_; }
    size_t alignment() const { return alignment_; }
    const std::map<std::string, GgufValue, std::less<>>& metadata() const { return metadata_; }
    const std::vector<GgufTensor>& tensors() const { return tensors_; }
    const GgufTensor* find_tensor(std::string_view name) const;

    // Typed reads of the metadata, each a kvx::Error naming the key when it is present with another type (an
    // integer key takes any integer type whose value fits; a float key takes f32 or f64).
    const GgufValue* find(std::string_view key) const;
    std::optional<int64_t> integer(std::string_view key) const;
    std::optional<double> real(std::string_view key) const;
    std::optional<bool> boolean(std::string_view key) const;
    std::optional<std::string_view> string(std::string_view key) const;
    // Arrays, each item's type checked; an absent key gives an empty array.
    std::vector<std::string_view> strings(std::string_view key) const;
    std::vector<float> floats(std::string_view key) const;     // f32 items
    std::vector<int64_t> integers(std::string_view key) const; // any integer item type

    // MappedFile::release_pages of the file's mapping: for a loader that copied a tensor into its own layout.
    void release_pages(const void* p, size_t bytes) const { file_->release_pages(p, bytes); }

    [[noreturn]] void fail(const std::string& what) const;  // kvx::Error "GGUF file 'PATH': what"

private:
    std::unique_ptr<MappedFile> file_;
    uint32_t version_ = 0;
    size_t alignment_ = 32;
    std::map<std::string, GgufValue, std::less<>> metadata_;
    std::vector<GgufTensor> tensors_;
    std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace kvx
