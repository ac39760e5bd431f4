// A GGUF tensor [rows][cols] as a kvx WeightMatrix: F32 and F16 in place (row-major, as ggml stores them),
// the block types moved into kvx's quantized layout (kernels/quant_matrix.h) with every weight's value kept:
// each one the kvx matrix encodes is, in fp32, the value llama.cpp's own dequantization gives. What changes
// is only where the bytes sit (kvx keeps the integers of a row together and the scales in their own table),
// and the width of some integers:
//
//   GGUF type      kvx matrix                                  weight                  bytes per 32 (GGUF's)
//   Q4_0           q4, block 32, fp16 scales                   d (q - 8)               18     (18)
//   Q4_1           q4, block 32, fp16 scales and mins          d q + m                 20     (20)
//   Q8_0           q8, block 32, fp16 scales                   d q                     34     (34)
//   Q5_0           q8, block 32, fp16 scales                   d (q - 16)              34     (22)
//   Q5_1           q8, block 32, fp16 scales and mins          d q + m                 36     (24)
//   IQ4_NL         q8, block 32, fp16 scales                   d table[q]              34     (18)
//   Q4_K           q4, block 32, int8 scales and mins (*)      (d sc) q + (-dmin) m    18.5   (18)
//   Q5_K           q8, block 32, int8 scales and mins (*)      (d sc) q + (-dmin) m    34.5   (22)
//   Q6_K           q8, block 16, int8 scales (*) (**)          (d sc) (q - 32)         34.25  (26.25)
//   Q3_K           q8, block 16, int8 scales (*) (**)          (d (sc - 32)) q         34.25  (13.75)
//   Q2_K           q4, block 16, int8 scales and mins (*)      (d sc) q + (-dmin) m    20.5   (10.5)
//   IQ4_XS         q8, block 32, int8 scales (*)               (d (ls - 32)) table[q]  33.25  (17)
//
// (**) In row groups (the SIMD levels' layout) q6: 6 bits per integer, 26.25 bytes per 32 (QuantMatrix's
// six_bit_values, kernels/quant_row_groups.h).
// (*) QuantScales::i8_of_f16: the block's 6-, 8- or 4-bit scale (and minimum) as an int8 multiplier, and the
// GGUF block's d (and -dmin) as the fp16 base of its 256 elements, as the file holds them. Each scale product
// (a 16-bit float times an integer of at most 8 bits) is exact in fp32, so the kernels' base * multiplier is
// llama.cpp's d * sc bit for bit, and s q + m its d1 q - m1. The wider integers of the 5- and sub-4-bit types
// still cost memory and read time: native kernels for those layouts are the follow-up that recovers it
// (docs/model-format.md, "GGUF files").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/files/gguf_file.h"
#include "engine/model/weight_matrix.h"
#include "kernels/quant_matrix.h"

namespace kvx {


// Memory a loader fills with weights: anonymous pages, on 2 MiB huge pages where the system gives them (a decode
// step streams the weights, and 4 KiB pages cost a TLB miss each: cpu/backend/huge_page_buffer.h), freed with
// the model. A backend reads it in place unless it wants another layout.
class OwnedBytes {
public:
    explicit OwnedBytes(size_t bytes);  // throws kvx::Error when the memory cannot be had
    ~OwnedBytes();
    OwnedBytes(OwnedBytes&& other) noexcept;
    OwnedBytes& operator=(OwnedBytes&&) = delete;
    OwnedBytes(const OwnedBytes&) = delete;

    uint8_t* data() const { return data_; }
    size_t size() const { return size_; }
    bool contains(const void* p) const {
        const auto* b = static_cast<const uint8_t*>(p);
        return b >= data_ && b < data_ + size_;
    }

private:
    uint8_t* data_ = nullptr;
    size_t size_ = 0;    // asked for
    size_t mapped_ = 0;  // mapped: size_ rounded up to whole pages
};

// Whether kvx keeps this type (the table above, F32, F16 and BF16), and the names of those it keeps.
bool gguf_matrix_type_supported(GgmlType type);
std::string gguf_matrix_type_names();

// Hands out 64-byte aligned pieces of OwnedBytes chunks of 64 MiB (a larger piece gets a chunk of its own), so
// that the small matrices of a layer share huge pages rather than each rounding one up.
class WeightArena {
public:
    explicit WeightArena(std::vector<OwnedBytes>& chunks) : chunks_(chunks) {}
    uint8_t* allocate(size_t bytes);

private:
    std::vector<OwnedBytes>& chunks_;
    size_t used_ = 0;  // of the last chunk
};

// The tensor as a [rows][cols] matrix (GGUF dims {cols, rows}, checked by the caller). Block types are moved
// into storage from `arena`; BF16 widens into fp32 there (exact). row_order: where given, kvx row r is
// the tensor's row row_order[r] (llama.cpp's Q/K row permutation undone); F32/F16 tensors are then copied too.
// x_rounding: the activations' rounding for the quantized kinds. quant_layout row_groups: a block matrix that
// fits (kernels/quant_row_groups.h) is stored in row groups, the rows layout only passing through a scratch
// buffer, so that the weights are held once. Throws kvx::Error for a type kvx does not keep.
WeightMatrix gguf_weight_matrix(const GgufFile& file, const GgufTensor& tensor, int64_t rows, int64_t cols,
                                const std::vector<int64_t>* row_order, QuantLayout quant_layout, WeightArena& arena);

}  // namespace kvx
