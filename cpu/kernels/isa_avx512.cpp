// The AVX-512 kernels (isa_avx512_level.inc) for AVX-512F/BW/VL: the int8 dot products through vpmaddubsw.
#define KVX_AVX512_LEVEL avx512
#define KVX_AVX512_TABLE_NAME "cpu-avx512"
#include "cpu/kernels/isa_avx512_level.inc"
