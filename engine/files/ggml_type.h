// The tensor types a GGUF file may hold (ggml's numbering, which the file stores), with the block each packs:
// a row of n values is n / block_values blocks of block_bytes bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kvx {

enum class GgmlType : uint32_t {
    f32 = 0, f16 = 1, q4_0 = 2, q4_1 = 3, q5_0 = 6, q5_1 = 7, q8_0 = 8, q8_1 = 9, q2_k = 10, q3_k = 11, q4_k = 12,
    q5_k = 13, q6_k = 14, q8_k = 15, iq2_xxs = 16, iq2_xs = 17, iq3_xxs = 18, iq1_s = 19, iq4_nl = 20, iq3_s = 21,
    iq2_s = 22, iq4_xs = 23, i8 = 24, i16 = 25, i32 = 26, i64 = 27, f64 = 28, iq1_m = 29, bf16 = 30, tq1_0 = 34,
    tq2_0 = 35, mxfp4 = 39,
};

struct GgmlTypeInfo {
    GgmlType type;
    std::string_view name;  // as llama.cpp prints it: "Q4_K", "F16", ...
    int32_t block_values;
    int32_t block_bytes;
};

// The type's row, or null for a number ggml does not (or no longer) define.
const GgmlTypeInfo* find_ggml_type(uint32_t number);
const GgmlTypeInfo& ggml_type_info(GgmlType type);

}  // namespace kvx
