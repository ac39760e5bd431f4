// Test helpers beside test_support.h for the kernels that copy or round: device data placed at an element
// offset (to reach the scalar paths that unaligned pointers take) and bit-for-bit comparison. Test code only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

#include "cuda/kernels/test_support.h"

namespace kvx::cuda::test {

// host's elements on the device, `offset` elements into a poisoned buffer: device allocations are 256-byte
// aligned, so an offset of 1 leaves data() aligned to sizeof(T) only.
template <typename T>
class OffsetBuffer {
public:
    OffsetBuffer(const std::vector<T>& host, size_t offset) : buffer_(host.size() + offset), offset_(offset) {
        poison(buffer_);
        if (!host.empty())
            check(cudaMemcpy(data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy (upload)");
    }
    // count poisoned elements (an output) at the offset.
    OffsetBuffer(size_t count, size_t offset) : buffer_(count + offset), offset_(offset) { poison(buffer_); }

    T* data() { return buffer_.data() + offset_; }
    void poison_all() { poison(buffer_); }
    std::vector<T> host() const {
        const std::vector<T> all = to_host(buffer_);
        return {all.begin() + static_cast<std::ptrdiff_t>(offset_), all.end()};
    }

private:
    DeviceBuffer<T> buffer_;
    size_t offset_;
};

// Elements whose bytes differ (NaNs compare by their bits too); a size mismatch counts every element.
template <typename T>
size_t count_bit_differences(const std::vector<T>& got, const std::vector<T>& want) {
    if (got.size() != want.size()) return std::max(got.size(), want.size());
    size_t differences = 0;
    for (size_t i = 0; i < got.size(); ++i)
        if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) ++differences;
    return differences;
}

}  // namespace kvx::cuda::test
