// cuda/kernels/kv_cache_ops.cu's reorder_beams and argument checks against the reference, bit for bit: it copies
// bytes, so nothing but identical bits is right, and the sources stay untouched. kv_append and copy_blocks are the
// kernel ops harness's (tests/kernel_ops/).
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <random>
#include <vector>

#include "cuda/kernels/cuda_kernels.h"
#include "cuda/kernels/test_buffers.h"
#include "cuda/kernels/test_support.h"
#include "kernels/baseline_kernels.h"
#include "kernels/error.h"
#include "kernels/kernels.h"

namespace {

using namespace kvx::cuda::test;
using kvx::KvDtype;

const kvx::KernelTable& reference = kvx::reference_kernels();

std::vector<unsigned char> random_bytes(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<unsigned char> v(n);
    for (unsigned char& b : v) b = static_cast<unsigned char>(rng());
    return v;
}

// A region size and a byte offset of the caches' base that select the 16-byte, 4-byte and 1-byte copy units.
struct CopyShape {
    int64_t elems;
    int elem_bytes;
    size_t base_offset;  // bytes
};

const CopyShape kCopyShapes[] = {
    {16384, 2, 0},  // 32 KiB regions: 16-byte units, two grid pieces per region
    {8, 4, 0},     // 32 bytes: 16-byte units
    {6, 2, 0},     // 12 bytes: 4-byte units
    {15, 2, 0},    // 30 bytes: single bytes
    {8, 4, 4},     // 16-byte multiple, but the base is only 4-byte aligned: 4-byte units
    {64, 2, 2},    // 2-byte aligned base: single bytes
    {1, 4, 0},
};

TEST_CASE("reorder_beams copies whole regions bit for bit") {
    SECTION("reorder_beams gathers whole beams of K and V, repeats included, bit for bit") {
        const std::vector<std::vector<int32_t>> orders = {{0}, {1, 0}, {2, 0, 2, 1}, {3, 3, 3, 3, 0}};
        for (const CopyShape& s : kCopyShapes) {
            for (const std::vector<int32_t>& order : orders) {
                INFO("beam elems " << s.elems << " elem bytes " << s.elem_bytes << " base offset " << s.base_offset
                                   << " beams " << order.size());
                const int n_beams = static_cast<int>(order.size());
                const size_t beam_bytes = static_cast<size_t>(s.elems) * static_cast<size_t>(s.elem_bytes);
                const size_t old_beams = 4;
                const std::vector<unsigned char> old_k = random_bytes(beam_bytes * old_beams, 6);
                const std::vector<unsigned char> old_v = random_bytes(beam_bytes * old_beams, 7);
                std::vector<unsigned char> want_k(beam_bytes * order.size()), want_v(beam_bytes * order.size());
                kvx::reference_baseline_kernels().reorder_beams(want_k.data(), want_v.data(), old_k.data(), old_v.data(),
                                                                order.data(), n_beams, s.elems, s.elem_bytes);
                OffsetBuffer<unsigned char> d_old_k(old_k, s.base_offset), d_old_v(old_v, s.base_offset);
                OffsetBuffer<unsigned char> d_new_k(want_k.size(), s.base_offset), d_new_v(want_v.size(), s.base_offset);
                auto d_order = to_device(order);
                kvx::cuda::reorder_beams(d_new_k.data(), d_new_v.data(), d_old_k.data(), d_old_v.data(), d_order.data(), n_beams,
                                         s.elems, s.elem_bytes, nullptr);
                CHECK(count_bit_differences(d_new_k.host(), want_k) == 0);
                CHECK(count_bit_differences(d_new_v.host(), want_v) == 0);
                CHECK(count_bit_differences(d_old_k.host(), old_k) == 0);  // sources untouched
            }
        }
    }
    SECTION("KV cache launches reject bad sizes with kvx::Error") {
        CHECK_THROWS_AS(kvx::cuda::kv_append(nullptr, nullptr, KvDtype::f32, nullptr, nullptr, nullptr, 1, 1, 8, 0, nullptr),
                        kvx::Error);
        CHECK_THROWS_AS(kvx::cuda::copy_blocks(nullptr, nullptr, nullptr, -1, 8, 4, nullptr), kvx::Error);
        CHECK_THROWS_AS(kvx::cuda::reorder_beams(nullptr, nullptr, nullptr, nullptr, nullptr, 2, 8, 0, nullptr), kvx::Error);
    }
}

}  // namespace
