// The AVX-512 kernels (isa_avx512_level.inc) for CPUs with AVX-512 VNNI (Ice Lake, Sapphire Rapids, Zen 4 on):
// the quantized matmul's int8 dot products through vpdpbusd (quant_lanes_avx512.inc, quant_row_lanes_avx512.inc),
// the same integers in fewer instructions; everything else as isa_avx512.cpp.
#define KVX_INT8_VNNI 1
#define KVX_AVX512_LEVEL avx512_vnni
#define KVX_AVX512_TABLE_NAME "cpu-avx512vnni"
#include "cpu/kernels/isa_avx512_level.inc"
