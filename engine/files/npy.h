// Minimal NumPy .npy (format 1.0) reading and writing: little-endian float32 and int64 arrays in C order,
// enough to exchange logits and token lists with any reference implementation.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kvx {

// data holds exactly the product of shape's dimensions. Throws kvx::Error when it does not, for a negative
// dimension, or when the file cannot be written whole (a partly written file is removed).
void write_npy_f32(const std::string& path, std::span<const float> data, const std::vector<int64_t>& shape);

struct NpyArray {
    std::string dtype;           // "<f4" or "<i8"
    std::vector<int64_t> shape;
    std::vector<float> f32;      // filled for "<f4"
    std::vector<int64_t> i64;    // filled for "<i8"
};

// Throws kvx::Error for a missing file, a malformed header, a dtype other than <f4/<i8, Fortran order,
// or a truncated payload.
NpyArray read_npy(const std::string& path);

}  // namespace kvx
