// The whole table, built once: every op of KernelTable with its shapes.
#include "tests/kernel_ops/op_table.h"

namespace kvx::ops {

const std::vector<Op>& op_table() {
    static const std::vector<Op> table = [] {
        std::vector<Op> ops;
        for (auto family : {matmul_ops, row_ops, cache_ops, elementwise_ops})
            for (Op& op : family()) ops.push_back(std::move(op));
        return ops;
    }();
    return table;
}

}  // namespace kvx::ops
