// What the CUDA kernel tests share: random inputs, device round trips, poisoned outputs, and the error
// measure of the comparisons that are not bit for bit (||cuda - ref|| / ||ref||). Header-only; test code only.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "cuda/kernels/device_buffer.h"
#include "kernels/f16.h"
#include "kernels/test_inputs.h"

namespace kvx::cuda::test {

using kvx::testing::random_floats;

inline std::vector<uint16_t> to_f16(std::span<const float> v) {
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = kvx::f32_to_f16(v[i]);  // qualified: kvx::cuda::f32_to_f16 (the kernel) would hide it
    return h;
}

template <typename T>
DeviceBuffer<T> to_device(std::span<const T> host) {
    DeviceBuffer<T> d;
    d.upload(host);
    return d;
}
template <typename T>
DeviceBuffer<T> to_device(const std::vector<T>& host) {
    return to_device(std::span<const T>(host));
}

template <typename T>
std::vector<T> to_host(const DeviceBuffer<T>& d) {
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    std::vector<T> h(d.size());
    d.download(h);
    return h;
}

// Every byte 0xFF: an fp32 NaN (and an fp16 NaN), so an output element a kernel forgot to write fails the
// comparison instead of passing on a leftover value.
template <typename T>
void poison(DeviceBuffer<T>& d) {
    check(cudaMemset(d.data(), 0xFF, d.bytes()), "cudaMemset (poison)");
}

template <typename T>
DeviceBuffer<T> poisoned(size_t count) {
    DeviceBuffer<T> d(count);
    poison(d);
    return d;
}

// ||got - want||_2 / ||want||_2, computed in double; infinity when got holds a non-finite value that want
// does not (an unwritten, poisoned element) or the sizes differ.
inline double relative_error(std::span<const float> got, std::span<const float> want) {
    if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
    double diff = 0, norm = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        if (!std::isfinite(got[i]) && std::isfinite(want[i])) return std::numeric_limits<double>::infinity();
        const double d = double{got[i]} - double{want[i]};
        diff += d * d;
        norm += double{want[i]} * double{want[i]};
    }
    return norm == 0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

inline std::vector<float> f16_to_floats(std::span<const uint16_t> h) {
    std::vector<float> v(h.size());
    for (size_t i = 0; i < h.size(); ++i) v[i] = kvx::f16_to_f32(h[i]);
    return v;
}

constexpr double kFp32Tolerance = 1e-5;  // ||cuda - ref|| / ||ref|| for fp32 kernels (docs/cuda.md)
constexpr double kFp16Tolerance = 2e-3;  // the same for kernels that store or read fp16

}  // namespace kvx::cuda::test
