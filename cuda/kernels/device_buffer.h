// Device memory owned by one object: plain cudaMalloc (never managed memory, whose page faults would
// make timings and the copy bandwidth meaningless), freed by the destructor.
#pragma once

#include <cstddef>
#include <span>
#include <utility>

#include "cuda/kernels/cuda_check.h"

namespace kvx::cuda {

template <typename T>
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t count) { resize(count); }
    ~DeviceBuffer() { release(); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    DeviceBuffer(DeviceBuffer&& other) noexcept
        : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
        if (this != &other) {
            release();
            data_ = std::exchange(other.data_, nullptr);
            count_ = std::exchange(other.count_, 0);
        }
        return *this;
    }

    // Discards the contents; a no-op when the size is unchanged.
    void resize(size_t count) {
        if (count == count_) return;
        release();
        if (count == 0) return;
        void* p = nullptr;
        check(cudaMalloc(&p, count * sizeof(T)), "cudaMalloc");
        data_ = static_cast<T*>(p);
        count_ = count;
    }
    // Grows (discarding the contents) only when count exceeds the size.
    void reserve(size_t count) {
        if (count > count_) resize(count);
    }

    T* data() { return data_; }
    const T* data() const { return data_; }
    size_t size() const { return count_; }
    size_t bytes() const { return count_ * sizeof(T); }

    // Synchronous copies of the whole buffer or its first host.size() elements.
    void upload(std::span<const T> host) {
        resize(host.size());
        if (!host.empty()) check(cudaMemcpy(data_, host.data(), host.size_bytes(), cudaMemcpyHostToDevice), "cudaMemcpy (upload)");
    }
    void download(std::span<T> host) const {
        if (!host.empty()) check(cudaMemcpy(host.data(), data_, host.size_bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy (download)");
    }

private:
    void release() noexcept {
        if (data_) cudaFree(data_);
        data_ = nullptr;
        count_ = 0;
    }

    T* data_ = nullptr;
    size_t count_ = 0;
};

}  // namespace kvx::cuda
