// One physical KV block copied onto another: the cache manager records these (copy-on-write before a shared
// block is written, beam forks) and a kernel table's copy_blocks performs them. One definition for both sides.
#pragma once

#include <cstdint>

namespace kvx {

struct BlockCopy {
    int32_t src;
    int32_t dst;
};

}  // namespace kvx
