// Host memory for data a kernel streams from DRAM over and over (the weights of every decode step, the KV cache of
// every attention): aligned to 2 MiB and advised to be backed by transparent huge pages where the system grants
// them. Pages are the system's zero pages until written, so memory is taken as it is used.
//
// Why: a decode step reads every weight once, hundreds of megabytes, and with 4 KiB pages each 4 KiB costs a
// TLB miss and a page walk on the way. On Zen 4, one thread, a scratch copy of the fp16 GEMV's tile loop read
// 17.5-21.7 GB/s (medians at three SmolLM2 shapes) from 4 KiB pages and 21.3-30.2 GB/s from huge pages, where
// the read ceiling has always been measured. The advice is only advice: without huge pages the memory works,
// merely slower.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvx::cpu {

class HugePageBuffer {
public:
    HugePageBuffer() = default;
    // Zero-filled bytes, untouched until written. Throws kvx::Error naming the size when the system refuses them.
    explicit HugePageBuffer(size_t bytes);
    ~HugePageBuffer();
    HugePageBuffer(HugePageBuffer&& other) noexcept;
    HugePageBuffer& operator=(HugePageBuffer&& other) noexcept;
    HugePageBuffer(const HugePageBuffer&) = delete;
    HugePageBuffer& operator=(const HugePageBuffer&) = delete;

    uint8_t* data() const { return data_; }
    size_t size() const { return size_; }

private:
    uint8_t* data_ = nullptr;  // 2 MiB aligned, inside mapping_
    size_t size_ = 0;
    void* mapping_ = nullptr;  // the anonymous mapping, over-allocated by up to 2 MiB to align data_
    size_t mapping_bytes_ = 0;
};

}  // namespace kvx::cpu
