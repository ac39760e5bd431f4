// cuda/kernels/kv_cache_ops.cu against the reference kernels, bit for bit: these kernels copy bytes or round to fp16,
// so nothing but identical bits is right. Every cache starts from the same bytes on both sides (poison where
// the kernel writes, random elsewhere) and is compared whole, so an element written that should not have
// been, or left unwritten, fails.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <numeric>
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
using kvx::BlockCopy;
using kvx::KvDtype;

const kvx::KernelTable& reference = kvx::reference_kernels();

std::vector<unsigned char> random_bytes(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<unsigned char> v(n);
    for (unsigned char& b : v) b = static_cast<unsigned char>(rng());
    return v;
}

// Keys and values with fp16's hard cases mixed in: beyond 65504 (inf), halfway cases, subnormals, NaN, -0.
std::vector<float> kv_values(size_t n, uint32_t seed) {
    std::vector<float> v = random_floats(n, seed, -3.0f, 3.0f);
    const float specials[] = {65504.0f, 65519.0f, 65520.0f, -1e6f, 1e-7f, -6e-8f, 2.98e-8f, 6.1e-5f, -0.0f,
                              std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                              1.00048828125f, 1.00146484375f};
    for (size_t i = 0; i < n; i += 7) v[i] = specials[(i / 7) % std::size(specials)];
    return v;
}

struct AppendShape {
    int n_rows, n_kv_heads, head_dim, block_size, num_blocks;
    size_t input_offset;  // elements before k and v: 1 forces the scalar path at a head_dim that divides by 4
};

TEST_CASE("kv_append writes fp32 and fp16 caches as the reference does, skipping slot -1") {
    const AppendShape shapes[] = {{1, 1, 8, 1, 2, 0},  {5, 3, 48, 16, 3, 0}, {4, 2, 80, 5, 4, 0}, {6, 2, 100, 4, 3, 0},
                                  {3, 1, 6, 3, 2, 0},  {7, 4, 64, 2, 5, 0},  {2, 2, 7, 16, 1, 0}, {9, 1, 128, 8, 2, 0},
                                  {4, 2, 80, 5, 4, 1}};
    for (const AppendShape& s : shapes) {
        for (KvDtype dtype : {KvDtype::f32, KvDtype::f16}) {
            INFO("rows " << s.n_rows << " kv heads " << s.n_kv_heads << " head_dim " << s.head_dim << " block_size "
                         << s.block_size << " input offset " << s.input_offset << (dtype == KvDtype::f16 ? " fp16" : " fp32"));
            const size_t row_elems = static_cast<size_t>(s.n_kv_heads) * static_cast<size_t>(s.head_dim);
            const size_t cache_elems = static_cast<size_t>(s.num_blocks) * static_cast<size_t>(s.block_size) * row_elems;
            const std::vector<float> k = kv_values(static_cast<size_t>(s.n_rows) * row_elems, 1);
            const std::vector<float> v = kv_values(static_cast<size_t>(s.n_rows) * row_elems, 2);
            // Distinct slots in shuffled order; every third row skipped.
            std::vector<int64_t> all_slots(static_cast<size_t>(s.num_blocks) * static_cast<size_t>(s.block_size));
            std::iota(all_slots.begin(), all_slots.end(), 0);
            std::shuffle(all_slots.begin(), all_slots.end(), std::mt19937(3));
            std::vector<int64_t> slots;
            for (int r = 0; r < s.n_rows; ++r) slots.push_back(r % 3 == 1 ? -1 : all_slots[static_cast<size_t>(r)]);

            OffsetBuffer<float> dk(k, s.input_offset), dv(v, s.input_offset);
            auto dslots = to_device(slots);
            if (dtype == KvDtype::f32) {
                std::vector<float> want_k(cache_elems), want_v(cache_elems);
                std::fill(want_k.begin(), want_k.end(), std::bit_cast<float>(0xffffffffu));  // the poison's bits
                std::fill(want_v.begin(), want_v.end(), std::bit_cast<float>(0xffffffffu));
                reference.kv_append(want_k.data(), want_v.data(), k.data(), v.data(), slots.data(), s.n_rows, s.n_kv_heads,
                                    s.head_dim, s.block_size);
                auto ck = poisoned<float>(cache_elems), cv = poisoned<float>(cache_elems);
                kvx::cuda::kv_append(ck.data(), cv.data(), dtype, dk.data(), dv.data(), dslots.data(), s.n_rows,
                                     s.n_kv_heads, s.head_dim, s.block_size, nullptr);
                CHECK(count_bit_differences(to_host(ck), want_k) == 0);
                CHECK(count_bit_differences(to_host(cv), want_v) == 0);
            } else {
                std::vector<uint16_t> want_k(cache_elems, 0xffff), want_v(cache_elems, 0xffff);
                reference.kv_append_f16(want_k.data(), want_v.data(), k.data(), v.data(), slots.data(), s.n_rows,
                                        s.n_kv_heads, s.head_dim, s.block_size);
                auto ck = poisoned<uint16_t>(cache_elems), cv = poisoned<uint16_t>(cache_elems);
                kvx::cuda::kv_append(ck.data(), cv.data(), dtype, dk.data(), dv.data(), dslots.data(), s.n_rows,
                                     s.n_kv_heads, s.head_dim, s.block_size, nullptr);
                CHECK(count_bit_differences(to_host(ck), want_k) == 0);
                CHECK(count_bit_differences(to_host(cv), want_v) == 0);
            }
        }
    }
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

TEST_CASE("copy_blocks and reorder_beams copy whole regions bit for bit") {
    SECTION("copy_blocks copies every pair's K and V block and nothing else, bit for bit") {
        const int num_blocks = 12;
        // Sources 0..5 onto fresh blocks; no dst is a src. Block 11 is left alone.
        const std::vector<BlockCopy> pairs = {{0, 7}, {3, 6}, {3, 10}, {5, 8}, {1, 9}};
        for (const CopyShape& s : kCopyShapes) {
            INFO("block elems " << s.elems << " elem bytes " << s.elem_bytes << " base offset " << s.base_offset);
            const size_t block_bytes = static_cast<size_t>(s.elems) * static_cast<size_t>(s.elem_bytes);
            const size_t cache_bytes = block_bytes * num_blocks;
            std::vector<unsigned char> want_k = random_bytes(cache_bytes, 4), want_v = random_bytes(cache_bytes, 5);
            OffsetBuffer<unsigned char> dk(want_k, s.base_offset), dv(want_v, s.base_offset);
            auto dpairs = to_device(pairs);
            reference.copy_blocks(want_k.data(), want_v.data(), pairs.data(), static_cast<int>(pairs.size()), s.elems,
                                  s.elem_bytes);
            kvx::cuda::copy_blocks(dk.data(), dv.data(), dpairs.data(), static_cast<int>(pairs.size()), s.elems, s.elem_bytes,
                                   nullptr);
            CHECK(count_bit_differences(dk.host(), want_k) == 0);
            CHECK(count_bit_differences(dv.host(), want_v) == 0);
        }
    }
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
