// The CUDA adapters of the harness (cuda_host_kernels.h): upload, launch, download, one op each.
#include "tests/kernel_ops/cuda_host_kernels.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "cuda/kernels/cuda_check.h"
#include "cuda/kernels/cuda_kernels.h"
#include "cuda/kernels/device_buffer.h"

namespace kvx::ops {
namespace {

using kvx::cuda::check;
using kvx::cuda::DeviceBuffer;

constexpr int kMaxPartitions = 64;  // the workspace capacity of a paged_attention launch

// Device copies of host buffers for one launch. A host pointer given twice (out aliasing an input) gets the
// same device copy; each copy sits as far past a 16-byte boundary as its host buffer does.
class Mirror {
public:
    template <class T>
    T* in(const T* host, size_t count) {
        if (host == nullptr) return nullptr;
        for (Copy& c : copies_)
            if (c.host == host) return static_cast<T*>(c.device);
        const size_t bytes = count * sizeof(T);
        const size_t offset = reinterpret_cast<uintptr_t>(host) % 16;
        Copy& c = copies_.emplace_back();
        c.host = host;
        c.bytes = bytes;
        c.buffer.resize(bytes + 16);
        c.device = c.buffer.data() + offset;
        if (bytes > 0) check(cudaMemcpy(c.device, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy (upload)");
        return static_cast<T*>(c.device);
    }
    // Copies host's device copy back after the launch.
    template <class T>
    void back(T* host) {
        check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
        for (Copy& c : copies_)
            if (c.host == host && c.bytes > 0) check(cudaMemcpy(host, c.device, c.bytes, cudaMemcpyDeviceToHost), "cudaMemcpy (download)");
    }

private:
    struct Copy {
        const void* host = nullptr;
        void* device = nullptr;
        size_t bytes = 0;
        DeviceBuffer<unsigned char> buffer;
    };
    std::vector<Copy> copies_;  // a Copy moved by the vector keeps its device memory, so returned pointers stay valid
};

size_t count(int64_t a, int64_t b = 1, int64_t c = 1, int64_t d = 1) { return static_cast<size_t>(a * b * c * d); }

void matmul(float* out, const float* x, const float* w, int n, int k, int m) {
    Mirror d;
    float* dout = d.in(out, count(n, m));
    kvx::cuda::gemv_f32(dout, d.in(x, count(n, k)), d.in(w, count(m, k)), nullptr, n, k, m, nullptr);
    d.back(out);
}

void matmul_f16(float* out, const float* x, const uint16_t* w, int n, int k, int m) {
    Mirror d;
    float* dout = d.in(out, count(n, m));
    kvx::cuda::gemv_f16(dout, d.in(x, count(n, k)), d.in(w, count(m, k)), nullptr, n, k, m, nullptr);
    d.back(out);
}

// w [m][k] in rows (the launch functions read no other layout): its tables copied as their sizes say.
void matmul_q(float* out, const float* x, const QuantMatrix& w, int n, int k, int m) {
    Mirror d;
    const QuantTableBytes bytes = quant_table_bytes(w, m);
    QuantMatrix dw = w;
    dw.q = d.in(w.q, bytes.q);
    dw.scales = d.in(static_cast<const unsigned char*>(w.scales), bytes.scales);
    dw.offsets = d.in(static_cast<const unsigned char*>(w.offsets), bytes.offsets);
    dw.scale_bases = d.in(w.scale_bases, bytes.scale_bases / 2);
    dw.min_bases = d.in(w.min_bases, bytes.min_bases / 2);
    float* dout = d.in(out, count(n, m));
    kvx::cuda::gemv_quant(dout, d.in(x, count(n, k)), dw, nullptr, n, k, m, nullptr);
    d.back(out);
}

void rmsnorm(float* out, const float* x, const float* weight, int n, int dim, float eps) {
    Mirror d;
    const float* dx = d.in(x, count(n, dim));
    kvx::cuda::rmsnorm(d.in(out, count(n, dim)), dx, d.in(weight, count(dim)), n, dim, eps, nullptr);
    d.back(out);
}

void layernorm(float* out, const float* x, const float* weight, const float* bias, int n, int dim, float eps) {
    Mirror d;
    const float* dx = d.in(x, count(n, dim));
    kvx::cuda::layernorm(d.in(out, count(n, dim)), dx, d.in(weight, count(dim)), d.in(bias, count(dim)), n, dim, eps, nullptr);
    d.back(out);
}

void rope(float* x, const float* cos, const float* sin, int n_rows, int n_heads, int head_dim, int rotary_dim) {
    Mirror d;
    kvx::cuda::rope(d.in(x, count(n_rows, n_heads, head_dim)), d.in(cos, count(n_rows, rotary_dim / 2)),
                    d.in(sin, count(n_rows, rotary_dim / 2)), n_rows, n_heads, head_dim, rotary_dim, nullptr);
    d.back(x);
}

// The caches up to the last block a slot names (the kernel writes nothing past it).
template <class T>
void kv_append_any(T* k_cache, T* v_cache, KvDtype dtype, const float* k, const float* v, const int64_t* slots,
                   int n_rows, int n_kv_heads, int head_dim, int block_size) {
    int64_t blocks = 0;
    for (int r = 0; r < n_rows; ++r) blocks = std::max(blocks, slots[r] / block_size + 1);
    Mirror d;
    const size_t cache = count(blocks, n_kv_heads, block_size, head_dim), rows = count(n_rows, n_kv_heads, head_dim);
    kvx::cuda::kv_append(d.in(k_cache, cache), d.in(v_cache, cache), dtype, d.in(k, rows), d.in(v, rows),
                         d.in(slots, count(n_rows)), n_rows, n_kv_heads, head_dim, block_size, nullptr);
    d.back(k_cache);
    d.back(v_cache);
}

void kv_append(float* k_cache, float* v_cache, const float* k, const float* v, const int64_t* slots, int n_rows,
               int n_kv_heads, int head_dim, int block_size) {
    kv_append_any(k_cache, v_cache, KvDtype::f32, k, v, slots, n_rows, n_kv_heads, head_dim, block_size);
}

void kv_append_f16(uint16_t* k_cache, uint16_t* v_cache, const float* k, const float* v, const int64_t* slots,
                   int n_rows, int n_kv_heads, int head_dim, int block_size) {
    kv_append_any(k_cache, v_cache, KvDtype::f16, k, v, slots, n_rows, n_kv_heads, head_dim, block_size);
}

int sm_count() {
    int sms = 0;
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "cudaDeviceGetAttribute");
    return sms;
}

// Planned as the backend plans a launch: tiles from the rows, partitions for the longest tile span and the
// device's SMs. The caches are copied up to the last block any used table entry names.
void paged_attention(const PagedAttentionArgs& args) {
    const std::span<const int32_t> row_seq(args.row_seq, static_cast<size_t>(args.n_rows));
    const int n_seqs = args.n_rows == 0 ? 0 : *std::max_element(row_seq.begin(), row_seq.end()) + 1;
    int num_blocks = 0;
    for (size_t i = 0; i < count(n_seqs, args.table_stride); ++i) num_blocks = std::max(num_blocks, args.block_tables[i] + 1);
    const std::vector<kvx::cuda::AttentionTile> tiles = kvx::cuda::plan_attention_tiles(row_seq, args.n_heads / args.n_kv_heads);
    int longest = 0;
    for (const kvx::cuda::AttentionTile& t : tiles) {
        int begin = std::numeric_limits<int>::max(), end = 0;
        for (int r = t.row_begin; r < t.row_begin + t.n_rows; ++r) {
            begin = std::min(begin, args.window > 0 ? std::max(0, args.row_pos[r] - args.window + 1) : 0);
            end = std::max(end, args.row_pos[r]);
        }
        longest = std::max(longest, end - begin + 1);
    }
    const kvx::cuda::AttentionPartitions partitions = kvx::cuda::plan_attention_partitions(
        static_cast<int>(tiles.size()), args.n_kv_heads, longest, sm_count(), kMaxPartitions);
    Mirror d;
    const size_t cache = count(num_blocks, args.n_kv_heads, args.block_size, args.head_dim);
    const size_t rows = count(args.n_rows, args.n_heads, args.head_dim);
    PagedAttentionArgs on_device = args;
    if (args.kv_dtype == KvDtype::f16) {
        on_device.k_cache = d.in(static_cast<const uint16_t*>(args.k_cache), cache);
        on_device.v_cache = d.in(static_cast<const uint16_t*>(args.v_cache), cache);
    } else {
        on_device.k_cache = d.in(static_cast<const float*>(args.k_cache), cache);
        on_device.v_cache = d.in(static_cast<const float*>(args.v_cache), cache);
    }
    on_device.q = d.in(args.q, rows);
    on_device.block_tables = d.in(args.block_tables, count(n_seqs, args.table_stride));
    on_device.row_seq = d.in(args.row_seq, count(args.n_rows));
    on_device.row_pos = d.in(args.row_pos, count(args.n_rows));
    on_device.out = d.in(args.out, rows);
    const auto* device_tiles = d.in(tiles.data(), tiles.size());
    DeviceBuffer<float> workspace(
        kvx::cuda::attention_workspace_floats(args.n_rows, args.n_heads, args.head_dim, partitions.n_partitions));
    kvx::cuda::paged_attention(on_device, device_tiles, static_cast<int>(tiles.size()), partitions, workspace.data(), nullptr);
    d.back(args.out);
}

// The caches up to the last block a pair names.
void copy_blocks(void* k_cache, void* v_cache, const BlockCopy* pairs, int n_pairs, int64_t block_elems, int elem_bytes) {
    int64_t blocks = 0;
    for (int i = 0; i < n_pairs; ++i) blocks = std::max({blocks, int64_t{pairs[i].src} + 1, int64_t{pairs[i].dst} + 1});
    Mirror d;
    const size_t bytes = count(blocks, block_elems, elem_bytes);
    auto* k = static_cast<unsigned char*>(k_cache);
    auto* v = static_cast<unsigned char*>(v_cache);
    kvx::cuda::copy_blocks(d.in(k, bytes), d.in(v, bytes), d.in(pairs, count(n_pairs)), n_pairs, block_elems, elem_bytes, nullptr);
    d.back(k);
    d.back(v);
}

// out = op(a, b) over n elements, out aliasing a or b or neither.
template <void (*launch)(float*, const float*, const float*, int64_t, cudaStream_t)>
void binary(float* out, const float* a, const float* b, int64_t n) {
    Mirror d;
    const float* da = d.in(a, count(n));
    const float* db = d.in(b, count(n));
    launch(d.in(out, count(n)), da, db, n, nullptr);
    d.back(out);
}

template <void (*launch)(float*, const float*, int64_t, cudaStream_t)>
void unary(float* out, const float* x, int64_t n) {
    Mirror d;
    const float* dx = d.in(x, count(n));
    launch(d.in(out, count(n)), dx, n, nullptr);
    d.back(out);
}

template <void (*launch)(float*, int64_t, float, cudaStream_t)>
void in_place(float* x, int64_t n, float param) {
    Mirror d;
    launch(d.in(x, count(n)), n, param, nullptr);
    d.back(x);
}

void add(float* x, const float* y, int64_t n) {
    Mirror d;
    kvx::cuda::add(d.in(x, count(n)), d.in(y, count(n)), n, nullptr);
    d.back(x);
}

void add_bias(float* x, const float* bias, int n, int dim) {
    Mirror d;
    kvx::cuda::add_bias(d.in(x, count(n, dim)), d.in(bias, count(dim)), n, dim, nullptr);
    d.back(x);
}

}  // namespace

Implementation cuda_implementation() {
    KernelTable table{};
    table.name = "cuda";
    table.matmul = matmul;
    table.matmul_f16 = matmul_f16;
    table.matmul_q = matmul_q;
    table.matmul_q_layout = QuantLayout::rows;
    table.matmul_f16_row_groups = false;
    table.matmuls = nullptr;  // the backend runs a group's parts as GEMVs (or cuBLAS)
    table.rmsnorm = rmsnorm;
    table.layernorm = layernorm;
    table.rope = rope;
    table.kv_append = kv_append;
    table.kv_append_f16 = kv_append_f16;
    table.paged_attention = paged_attention;
    table.copy_blocks = copy_blocks;
    table.swiglu = binary<kvx::cuda::swiglu>;
    table.gelu_tanh = unary<kvx::cuda::gelu_tanh>;
    table.geglu_tanh = binary<kvx::cuda::geglu_tanh>;
    table.gelu_erf = unary<kvx::cuda::gelu_erf>;
    table.softcap = in_place<kvx::cuda::softcap>;
    table.clamp = in_place<kvx::cuda::clamp>;
    table.scale = in_place<kvx::cuda::scale>;
    table.add = add;
    table.add_bias = add_bias;
    return {.name = "cuda", .table = table, .rounds_quant_x = false, .max_matmul_rows = kvx::cuda::kGemvMaxRows,
            .reads_quant_row_groups = false, .device_math = true};
}

}  // namespace kvx::ops
