#include "engine/files/ggml_type.h"

#include <array>

#include "kernels/error.h"

namespace kvx {
namespace {

// ggml's type_traits (ggml.c): values per block and bytes per block. The numbers 4, 5 (Q4_2, Q4_3) and 31..33
// (the repacked Q4_0_4_4 family) were removed from ggml; files never hold them.
constexpr std::array<GgmlTypeInfo, 32> kTypes = {{
    {GgmlType::f32, "F32", 1, 4},         {GgmlType::f16, "F16", 1, 2},          {GgmlType::q4_0, "Q4_0", 32, 18},
    {GgmlType::q4_1, "Q4_1", 32, 20},     {GgmlType::q5_0, "Q5_0", 32, 22},      {GgmlType::q5_1, "Q5_1", 32, 24},
    {GgmlType::q8_0, "Q8_0", 32, 34},     {GgmlType::q8_1, "Q8_1", 32, 36},      {GgmlType::q2_k, "Q2_K", 256, 84},
    {GgmlType::q3_k, "Q3_K", 256, 110},   {GgmlType::q4_k, "Q4_K", 256, 144},    {GgmlType::q5_k, "Q5_K", 256, 176},
    {GgmlType::q6_k, "Q6_K", 256, 210},   {GgmlType::q8_k, "Q8_K", 256, 292},    {GgmlType::iq2_xxs, "IQ2_XXS", 256, 66},
    {GgmlType::iq2_xs, "IQ2_XS", 256, 74}, {GgmlType::iq3_xxs, "IQ3_XXS", 256, 98}, {GgmlType::iq1_s, "IQ1_S", 256, 50},
    {GgmlType::iq4_nl, "IQ4_NL", 32, 18}, {GgmlType::iq3_s, "IQ3_S", 256, 110},  {GgmlType::iq2_s, "IQ2_S", 256, 82},
    {GgmlType::iq4_xs, "IQ4_XS", 256, 136}, {GgmlType::i8, "I8", 1, 1},          {GgmlType::i16, "I16", 1, 2},
    {GgmlType::i32, "I32", 1, 4},         {GgmlType::i64, "I64", 1, 8},          {GgmlType::f64, "F64", 1, 8},
    {GgmlType::iq1_m, "IQ1_M", 256, 56},  {GgmlType::bf16, "BF16", 1, 2},        {GgmlType::tq1_0, "TQ1_0", 256, 54},
    {GgmlType::tq2_0, "TQ2_0", 256, 66},  {GgmlType::mxfp4, "MXFP4", 32, 17},
}};

}  // namespace

const GgmlTypeInfo* find_ggml_type(uint32_t number) {
    for (const GgmlTypeInfo& info : kTypes)
        if (static_cast<uint32_t>(info.type) == number) return &info;
    return nullptr;
}

const GgmlTypeInfo& ggml_type_info(GgmlType type) {
    const GgmlTypeInfo* info = find_ggml_type(static_cast<uint32_t>(type));
    if (!info) throw Error("ggml type " + std::to_string(static_cast<uint32_t>(type)) + " is not defined");
    return *info;
}

}  // namespace kvx
