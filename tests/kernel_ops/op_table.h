// The table's ops, one file a family, assembled by op_table.cpp into op_table().
#pragma once

#include <vector>

#include "tests/kernel_ops/op_harness.h"

namespace kvx::ops {

std::vector<Op> matmul_ops();       // ops_matmul.cpp: matmul, matmul_f16, matmuls, matmul_q
std::vector<Op> row_ops();          // ops_rows.cpp: rmsnorm, layernorm, rope
std::vector<Op> cache_ops();        // ops_cache.cpp: kv_append, kv_append_f16, paged_attention, copy_blocks
std::vector<Op> elementwise_ops();  // ops_elementwise.cpp: the activations, softcap, clamp, scale, add, add_bias

}  // namespace kvx::ops
