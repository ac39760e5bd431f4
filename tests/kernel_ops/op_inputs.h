// The inputs the harness's ops build: host buffers placed on or off alignment, quantized matrices whose
// integers the harness decodes itself, paged attention batches. Header-only; test code only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/f16.h"
#include "kernels/kernels.h"
#include "kernels/quant_matrix.h"
#include "kernels/test_inputs.h"

namespace kvx::ops {

using kvx::testing::random_floats;
using kvx::testing::RandomQuant;

inline std::vector<float> nan_filled(size_t n) { return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()); }

inline std::vector<uint16_t> to_f16(const std::vector<float>& v) {
    std::vector<uint16_t> h(v.size());
    std::transform(v.begin(), v.end(), h.begin(), kvx::f32_to_f16);
    return h;
}

inline std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> bytes(n);
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
    return bytes;
}

// Values with fp16's hard cases mixed in: beyond 65504 (inf), halfway cases, subnormals, NaN, inf, -0.
inline std::vector<float> values_with_f16_specials(size_t n, uint32_t seed) {
    std::vector<float> v = random_floats(n, seed, -3.0f, 3.0f);
    const float specials[] = {65504.0f, 65519.0f, 65520.0f, -1e6f, 1e-7f, -6e-8f, 2.98e-8f, 5.9604645e-8f, 6.1e-5f,
                              -0.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                              1.00048828125f, 1.00146484375f};
    for (size_t i = 0; i < n; i += 7) v[i] = specials[(i / 7) % std::size(specials)];
    return v;
}

// A host copy of `values` that starts `offset` elements past a 16-byte boundary (offset 1: the scalar
// paths of kernels that load vectors; the CUDA adapters keep the offset on the device).
template <class T>
class Placed {
public:
    Placed(const std::vector<T>& values, int offset) : storage_(values.size() + 16 / sizeof(T) + 1), size_(values.size()) {
        const auto address = reinterpret_cast<uintptr_t>(storage_.data());
        const size_t to_boundary = ((16 - address % 16) % 16) / sizeof(T);
        begin_ = to_boundary + static_cast<size_t>(offset);
        std::copy(values.begin(), values.end(), storage_.begin() + static_cast<std::ptrdiff_t>(begin_));
    }
    T* data() { return storage_.data() + begin_; }
    const T* data() const { return storage_.data() + begin_; }
    std::vector<T> values() const {
        return {storage_.begin() + static_cast<std::ptrdiff_t>(begin_),
                storage_.begin() + static_cast<std::ptrdiff_t>(begin_ + size_)};
    }

private:
    std::vector<T> storage_;
    size_t size_;
    size_t begin_;
};

// A batch over a paged cache: sequence s holds lengths[s] positions and its rows are its last rows_of[s]
// (1: a decode row; more: a prefill chunk). Rows: sequence 1's first, then sequence 0's, then the rest, so a
// prefill chunk sits between decode rows. Physical blocks are shuffled, a few never referenced, table
// entries past a sequence's end -1. With a window, positions no row sees hold NaN and the table entries of
// blocks wholly before every row's window are -1 (released), so reading them fails.
struct AttentionBatch {
    int n_heads = 0, n_kv_heads = 0, head_dim = 0, block_size = 0, window = 0, table_stride = 0;
    std::vector<float> q;          // [n_rows][n_heads][head_dim]
    std::vector<float> k_cache;    // [num_blocks][n_kv_heads][block_size][head_dim]
    std::vector<float> v_cache;    // [num_blocks][n_kv_heads][block_size][head_dim]
    std::vector<uint16_t> k_f16;   // k_cache as fp16 bits
    std::vector<uint16_t> v_f16;   // v_cache as fp16 bits
    std::vector<int32_t> tables;   // [n_seqs][table_stride]
    std::vector<int32_t> row_seq;  // [n_rows]
    std::vector<int32_t> row_pos;  // [n_rows]

    int n_rows() const { return static_cast<int>(row_seq.size()); }

    AttentionBatch(int heads, int kv_heads, int dim, int block, const std::vector<int>& lengths,
                   const std::vector<int>& rows_of, int window_, uint32_t seed)
        : n_heads(heads), n_kv_heads(kv_heads), head_dim(dim), block_size(block), window(window_) {
        std::mt19937 rng(seed);
        const int n_seqs = static_cast<int>(lengths.size());
        std::vector<int> blocks_of(static_cast<size_t>(n_seqs));
        int used = 0;
        for (size_t s = 0; s < blocks_of.size(); ++s) {
            blocks_of[s] = (lengths[s] + block_size - 1) / block_size;
            used += blocks_of[s];
            table_stride = std::max(table_stride, blocks_of[s] + 2);
        }
        const int num_blocks = used + 3;
        std::vector<int32_t> physical(static_cast<size_t>(num_blocks));
        std::iota(physical.begin(), physical.end(), 0);
        std::shuffle(physical.begin(), physical.end(), rng);
        tables.assign(static_cast<size_t>(n_seqs * table_stride), -1);
        size_t next = 0;
        for (int s = 0; s < n_seqs; ++s)
            for (int b = 0; b < blocks_of[static_cast<size_t>(s)]; ++b) tables[static_cast<size_t>(s * table_stride + b)] = physical[next++];
        auto add_rows = [&](int s) {
            const auto si = static_cast<size_t>(s);
            for (int r = 0; r < rows_of[si]; ++r) {
                row_seq.push_back(s);
                row_pos.push_back(lengths[si] - rows_of[si] + r);
            }
        };
        if (n_seqs > 1) add_rows(1);
        add_rows(0);
        for (int s = 2; s < n_seqs; ++s) add_rows(s);

        const size_t cache_size = static_cast<size_t>(num_blocks) * static_cast<size_t>(n_kv_heads * block_size * head_dim);
        k_cache = random_floats(cache_size, seed + 1);
        v_cache = random_floats(cache_size, seed + 2);
        // Large queries make the softmax peaky, so that the running maximum really moves.
        q = random_floats(static_cast<size_t>(n_rows() * n_heads * head_dim), seed + 3, -4.0f, 4.0f);
        if (window > 0) poison_outside_window(lengths);
        k_f16 = to_f16(k_cache);
        v_f16 = to_f16(v_cache);
    }

    PagedAttentionArgs args(KvDtype dtype, float softcap, float* out) const {
        PagedAttentionArgs a;
        a.q = q.data();
        a.k_cache = dtype == KvDtype::f16 ? static_cast<const void*>(k_f16.data()) : k_cache.data();
        a.v_cache = dtype == KvDtype::f16 ? static_cast<const void*>(v_f16.data()) : v_cache.data();
        a.block_tables = tables.data();
        a.row_seq = row_seq.data();
        a.row_pos = row_pos.data();
        a.out = out;
        a.n_rows = n_rows();
        a.n_heads = n_heads;
        a.n_kv_heads = n_kv_heads;
        a.head_dim = head_dim;
        a.block_size = block_size;
        a.table_stride = table_stride;
        a.window = window;
        a.kv_dtype = dtype;
        a.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
        a.softcap = softcap;
        return a;
    }

private:
    void poison_outside_window(const std::vector<int>& lengths) {
        const float nan = std::numeric_limits<float>::quiet_NaN();
        for (int s = 0; s < static_cast<int>(lengths.size()); ++s) {
            int first_seen = lengths[static_cast<size_t>(s)];
            for (int r = 0; r < n_rows(); ++r)
                if (row_seq[static_cast<size_t>(r)] == s)
                    first_seen = std::min(first_seen, std::max(0, row_pos[static_cast<size_t>(r)] - window + 1));
            int32_t* table = tables.data() + static_cast<size_t>(s * table_stride);
            for (int p = 0; p < first_seen; ++p) {
                const int32_t block = table[p / block_size];
                if (block < 0) continue;  // released already
                for (int h = 0; h < n_kv_heads; ++h) {
                    const auto at = static_cast<std::ptrdiff_t>(((static_cast<size_t>(block) * static_cast<size_t>(n_kv_heads) +
                                                                  static_cast<size_t>(h)) * static_cast<size_t>(block_size) +
                                                                 static_cast<size_t>(p % block_size)) * static_cast<size_t>(head_dim));
                    std::fill_n(k_cache.begin() + at, head_dim, nan);
                    std::fill_n(v_cache.begin() + at, head_dim, nan);
                }
                if (p % block_size == block_size - 1) table[p / block_size] = -1;
            }
        }
    }
};

}  // namespace kvx::ops
