#include "engine/model/gguf_matrix.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>

#include "engine/model/row_group_copy.h"
#include "engine/model/weight_matrix.h"
#include "kernels/error.h"
#include "kernels/f16.h"
#include "kernels/quant_row_groups.h"

namespace kvx {
namespace {

// One GGUF block decoded: its integers in element order (0..15 for a q4 target, int8 otherwise) and, per kvx
// block inside it, the scale and the minimum as the target's table entries: fp16 bits, or for a K-quant
// (QuantScales::i8_of_f16) the int8 multipliers of the block's fp16 bases, d and -dmin.
struct DecodedBlock {
    int8_t q[256];
    uint32_t scale[16];  // fp16 bits, or an int8 in the low byte
    uint32_t min[16];
    uint16_t scale_base;  // i8_of_f16: fp16 bits
    uint16_t min_base;
};

using Decode = void (*)(const uint8_t* block, DecodedBlock& out);

// How a GGUF type lands in kvx (the table of gguf_matrix.h).
struct Relayout {
    GgmlType type;
    int32_t bits;
    int32_t block;
    QuantScales scales;  // f16, or i8_of_f16 for the types of 256 with a base per block
    QuantOffset offset;
    Decode decode;
    bool six_bit_values = false;  // every integer in -32..31: q6 in row groups (QuantMatrix::six_bit_values)
};

uint16_t half_at(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return h;
}
// The fp16 at p negated (the sign bit flipped: exact), for the minimums -(dmin m) = (-dmin) m.
uint16_t negated_half_at(const uint8_t* p) { return static_cast<uint16_t>(half_at(p) ^ 0x8000u); }
// An int8 multiplier as a DecodedBlock entry.
uint32_t multiplier(int v) { return static_cast<uint8_t>(static_cast<int8_t>(v)); }

// ggml's non-linear 4-bit values (IQ4_NL, IQ4_XS).
constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// Q4_0 {fp16 d; u8 qs[16]}: element j in qs[j]'s low nibble, j + 16 in its high one, as kvx's q4 groups.
void decode_q4_0(const uint8_t* b, DecodedBlock& o) {
    for (int j = 0; j < 16; ++j) {
        o.q[j] = static_cast<int8_t>(b[2 + j] & 0x0f);
        o.q[j + 16] = static_cast<int8_t>(b[2 + j] >> 4);
    }
    o.scale[0] = half_at(b);
}

// Q4_1 {fp16 d; fp16 m; u8 qs[16]}.
void decode_q4_1(const uint8_t* b, DecodedBlock& o) {
    for (int j = 0; j < 16; ++j) {
        o.q[j] = static_cast<int8_t>(b[4 + j] & 0x0f);
        o.q[j + 16] = static_cast<int8_t>(b[4 + j] >> 4);
    }
    o.scale[0] = half_at(b);
    o.min[0] = half_at(b + 2);
}

// Q5_0 / Q5_1: {fp16 d; [fp16 m;] u32 qh; u8 qs[16]}: bit j of qh is element j's fifth bit.
void decode_q5(const uint8_t* qh_bytes, const uint8_t* qs, int zero, DecodedBlock& o) {
    uint32_t qh;
    std::memcpy(&qh, qh_bytes, 4);
    for (int j = 0; j < 16; ++j) {
        o.q[j] = static_cast<int8_t>(((qs[j] & 0x0f) | (((qh >> j) & 1) << 4)) - zero);
        o.q[j + 16] = static_cast<int8_t>(((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - zero);
    }
}
void decode_q5_0(const uint8_t* b, DecodedBlock& o) {
    decode_q5(b + 2, b + 6, 16, o);
    o.scale[0] = half_at(b);
}
void decode_q5_1(const uint8_t* b, DecodedBlock& o) {
    decode_q5(b + 4, b + 8, 0, o);
    o.scale[0] = half_at(b);
    o.min[0] = half_at(b + 2);
}

// Q8_0 {fp16 d; i8 qs[32]}.
void decode_q8_0(const uint8_t* b, DecodedBlock& o) {
    std::memcpy(o.q, b + 2, 32);
    o.scale[0] = half_at(b);
}

// IQ4_NL {fp16 d; u8 qs[16]}: nibbles as Q4_0's, each an index into kIq4Values.
void decode_iq4_nl(const uint8_t* b, DecodedBlock& o) {
    for (int j = 0; j < 16; ++j) {
        o.q[j] = kIq4Values[b[2 + j] & 0x0f];
        o.q[j + 16] = kIq4Values[b[2 + j] >> 4];
    }
    o.scale[0] = half_at(b);
}

// Q4_K and Q5_K's 6-bit scale and minimum of sub-block j (ggml's get_scale_min_k4), from scales[12].
void k4_scale_min(int j, const uint8_t* s, int& sc, int& m) {
    if (j < 4) {
        sc = s[j] & 63;
        m = s[j + 4] & 63;
    } else {
        sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// Q4_K {fp16 d; fp16 dmin; u8 scales[12]; u8 qs[128]}: 8 sub-blocks of 32; each 64 elements take 32 bytes of
// qs, the first 32 elements in the low nibbles, the next 32 in the high ones.
// Q5_K {fp16 d; fp16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}: as Q4_K, with a fifth bit per element in qh
// (bit 2c of qh[l] for element l of chunk c's low half, bit 2c + 1 for its high half).
void decode_k_scaled(const uint8_t* b, const uint8_t* qh, const uint8_t* qs, DecodedBlock& o) {
    o.scale_base = half_at(b);
    o.min_base = negated_half_at(b + 2);
    const uint8_t* scales = b + 4;
    for (int c = 0; c < 4; ++c) {
        for (int half = 0; half < 2; ++half) {
            const int sub = 2 * c + half;
            int sc = 0, m = 0;
            k4_scale_min(sub, scales, sc, m);
            o.scale[sub] = multiplier(sc);
            o.min[sub] = multiplier(m);
            for (int l = 0; l < 32; ++l) {
                int v = half ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 0x0f;
                if (qh) v |= ((qh[l] >> sub) & 1) << 4;
                o.q[32 * sub + l] = static_cast<int8_t>(v);
            }
        }
    }
}
void decode_q4_k(const uint8_t* b, DecodedBlock& o) { decode_k_scaled(b, nullptr, b + 16, o); }
void decode_q5_k(const uint8_t* b, DecodedBlock& o) { decode_k_scaled(b, b + 16, b + 48, o); }

// Q6_K {u8 ql[128]; u8 qh[64]; i8 scales[16]; fp16 d}: 16 sub-blocks of 16. Each half of 128 elements takes
// 64 bytes of ql and 32 of qh; element l + 32 k of a half (k = 0..3) has its low 4 bits in ql (byte l or
// l + 32, low nibble for k = 0, 1, high for 2, 3) and its high 2 bits in qh[l] >> 2k.
void decode_q6_k(const uint8_t* b, DecodedBlock& o) {
    const uint8_t* ql = b;
    const uint8_t* qh = b + 128;
    const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
    o.scale_base = half_at(b + 208);
    for (int sub = 0; sub < 16; ++sub) o.scale[sub] = multiplier(scales[sub]);
    for (int h = 0; h < 2; ++h) {
        for (int l = 0; l < 32; ++l) {
            const uint8_t* low = ql + 64 * h;
            const uint8_t high = qh[32 * h + l];
            const int v[4] = {(low[l] & 0x0f) | ((high & 3) << 4), (low[l + 32] & 0x0f) | (((high >> 2) & 3) << 4),
                              (low[l] >> 4) | (((high >> 4) & 3) << 4), (low[l + 32] >> 4) | (((high >> 6) & 3) << 4)};
            for (int k = 0; k < 4; ++k) o.q[128 * h + 32 * k + l] = static_cast<int8_t>(v[k] - 32);
        }
    }
}

// Q3_K {u8 hmask[32]; u8 qs[64]; u8 scales[12]; fp16 d}: 16 sub-blocks of 16 with 6-bit scales (minus 32).
// Each half of 128 elements takes 32 bytes of qs; element 16 s + l of a half (s = 0..7) has its low 2 bits in
// qs[l + 16 (s % 2)] >> 2 (s / 2), and 4 is taken off unless bit (4 h + s / 2) of hmask[l + 16 (s % 2)] is set.
void decode_q3_k(const uint8_t* b, DecodedBlock& o) {
    const uint8_t* hmask = b;
    const uint8_t* qs = b + 32;
    const uint8_t* packed = b + 96;
    o.scale_base = half_at(b + 108);
    for (int sub = 0; sub < 16; ++sub) {
        // Sub-block j's scale: its low 4 bits in packed[j % 8] (low nibble for j < 8), its high 2 bits in
        // packed[8 + j % 4] >> 2 (j / 4).
        const int low = sub < 8 ? packed[sub] & 0x0f : packed[sub - 8] >> 4;
        const int high = (packed[8 + sub % 4] >> (2 * (sub / 4))) & 3;
        o.scale[sub] = multiplier((low | (high << 4)) - 32);
    }
    for (int h = 0; h < 2; ++h)
        for (int s = 0; s < 8; ++s)
            for (int l = 0; l < 16; ++l) {
                const int byte = l + 16 * (s % 2);
                const int shift = 2 * (s / 2);
                const int v = (qs[32 * h + byte] >> shift) & 3;
                const bool high_set = (hmask[byte] >> (4 * h + s / 2)) & 1;
                o.q[128 * h + 16 * s + l] = static_cast<int8_t>(v - (high_set ? 0 : 4));
            }
}

// Q2_K {u8 scales[16]; u8 qs[64]; fp16 d; fp16 dmin}: 16 sub-blocks of 16, each scale byte a 4-bit scale (low)
// and a 4-bit minimum (high). Element layout as Q3_K's low bits.
void decode_q2_k(const uint8_t* b, DecodedBlock& o) {
    const uint8_t* scales = b;
    const uint8_t* qs = b + 16;
    o.scale_base = half_at(b + 80);
    o.min_base = negated_half_at(b + 82);
    for (int sub = 0; sub < 16; ++sub) {
        o.scale[sub] = multiplier(scales[sub] & 0x0f);
        o.min[sub] = multiplier(scales[sub] >> 4);
    }
    for (int h = 0; h < 2; ++h)
        for (int s = 0; s < 8; ++s)
            for (int l = 0; l < 16; ++l)
                o.q[128 * h + 16 * s + l] = static_cast<int8_t>((qs[32 * h + l + 16 * (s % 2)] >> (2 * (s / 2))) & 3);
}

// IQ4_XS {fp16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]}: 8 sub-blocks of 32, each a 6-bit scale (minus 32,
// low 4 bits in scales_l, high 2 in scales_h) and 16 bytes of nibbles as IQ4_NL's.
void decode_iq4_xs(const uint8_t* b, DecodedBlock& o) {
    o.scale_base = half_at(b);
    const uint16_t scales_h = half_at(b + 2);
    const uint8_t* scales_l = b + 4;
    const uint8_t* qs = b + 8;
    for (int sub = 0; sub < 8; ++sub) {
        const int ls = ((scales_l[sub / 2] >> (4 * (sub % 2))) & 0x0f) | (((scales_h >> (2 * sub)) & 3) << 4);
        o.scale[sub] = multiplier(ls - 32);
        for (int j = 0; j < 16; ++j) {
            o.q[32 * sub + j] = kIq4Values[qs[16 * sub + j] & 0x0f];
            o.q[32 * sub + j + 16] = kIq4Values[qs[16 * sub + j] >> 4];
        }
    }
}

constexpr QuantScales kF16 = QuantScales::f16, kI8 = QuantScales::i8_of_f16;
constexpr Relayout kRelayouts[] = {
    {GgmlType::q4_0, 4, 32, kF16, QuantOffset::none, decode_q4_0},
    {GgmlType::q4_1, 4, 32, kF16, QuantOffset::mins, decode_q4_1},
    {GgmlType::q8_0, 8, 32, kF16, QuantOffset::none, decode_q8_0},
    {GgmlType::q5_0, 8, 32, kF16, QuantOffset::none, decode_q5_0},
    {GgmlType::q5_1, 8, 32, kF16, QuantOffset::mins, decode_q5_1},
    {GgmlType::iq4_nl, 8, 32, kF16, QuantOffset::none, decode_iq4_nl},
    {GgmlType::q4_k, 4, 32, kI8, QuantOffset::mins, decode_q4_k},
    {GgmlType::q5_k, 8, 32, kI8, QuantOffset::mins, decode_q5_k},
    {GgmlType::q6_k, 8, 16, kI8, QuantOffset::none, decode_q6_k, true},
    {GgmlType::q3_k, 8, 16, kI8, QuantOffset::none, decode_q3_k, true},
    {GgmlType::q2_k, 4, 16, kI8, QuantOffset::mins, decode_q2_k},
    {GgmlType::iq4_xs, 8, 32, kI8, QuantOffset::none, decode_iq4_xs},
};

const Relayout* find_relayout(GgmlType type) {
    for (const Relayout& r : kRelayouts)
        if (r.type == type) return &r;
    return nullptr;
}

size_t round_up_64(size_t n) { return (n + 63) / 64 * 64; }  // each table on its own cache line

// The rows-layout scratch a matrix goes through on its way to row groups (gguf_weight_matrix): large enough
// that each slab is a few parallel loops' worth of work, small beside any model.
constexpr size_t kRelayoutSlabBytes = size_t{1} << 20;

// A DecodedBlock entry into a table of `bytes` (1: an int8 multiplier, 2: fp16 bits).
void put_entry(uint8_t* at, uint32_t entry, size_t bytes) {
    if (bytes == 1) {
        *at = static_cast<uint8_t>(entry);
        return;
    }
    const auto half = static_cast<uint16_t>(entry);
    std::memcpy(at, &half, 2);
}

// The tables of a matrix in the rows layout (kernels/quant_matrix.h), or where one of its rows goes: q
// [rows][row_bytes], scales and mins [rows][n_blocks] entries, scale_bases and min_bases [rows][cols / 256] fp16
// (i8_of_f16). Tables a form lacks are null.
struct RowTables {
    uint8_t* q;
    uint8_t* scales;
    uint8_t* mins;
    uint16_t* scale_bases;
    uint16_t* min_bases;
};

// One row of the tensor's blocks into a row of the kvx tables.
void relayout_row(const Relayout& r, const GgmlTypeInfo& info, const uint8_t* src, int64_t cols, const RowTables& to) {
    const int64_t blocks = cols / info.block_values;
    const int subs = info.block_values / r.block;
    const size_t entry_bytes = quant_scale_bytes(r.scales);
    DecodedBlock d{};
    for (int64_t b = 0; b < blocks; ++b) {
        r.decode(src + b * info.block_bytes, d);
        const int64_t first = b * info.block_values;  // the block's first element in the row
        if (r.bits == 8) {
            std::memcpy(to.q + first, d.q, static_cast<size_t>(info.block_values));
        } else {
            // kvx's q4 groups of 32: byte t holds element t (low nibble) and element t + 16 (high).
            for (int g = 0; g < info.block_values / 32; ++g)
                for (int t = 0; t < 16; ++t)
                    to.q[(first + 32 * g) / 2 + t] =
                        static_cast<uint8_t>((d.q[32 * g + t] & 0x0f) | ((d.q[32 * g + t + 16] & 0x0f) << 4));
        }
        for (int s = 0; s < subs; ++s) {
            put_entry(to.scales + static_cast<size_t>(b * subs + s) * entry_bytes, d.scale[s], entry_bytes);
            if (to.mins) put_entry(to.mins + static_cast<size_t>(b * subs + s) * entry_bytes, d.min[s], entry_bytes);
        }
        // A GGUF block of 256 is one base's elements (kQuantSuperBlock).
        if (to.scale_bases) to.scale_bases[b] = d.scale_base;
        if (to.min_bases) to.min_bases[b] = d.min_base;
    }
}

}  // namespace

OwnedBytes::OwnedBytes(size_t bytes) : size_(bytes) {
    constexpr size_t kHugePage = size_t{2} << 20;
    mapped_ = (std::max<size_t>(bytes, 1) + kHugePage - 1) / kHugePage * kHugePage;
    void* p = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw Error("out of memory: cannot map " + std::to_string(bytes) + " bytes for model weights");
    ::madvise(p, mapped_, MADV_HUGEPAGE);  // a hint: without transparent huge pages, plain pages
    data_ = static_cast<uint8_t*>(p);
}

OwnedBytes::~OwnedBytes() {
    if (data_) ::munmap(data_, mapped_);
}

OwnedBytes::OwnedBytes(OwnedBytes&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)), mapped_(std::exchange(other.mapped_, 0)) {}

uint8_t* WeightArena::allocate(size_t bytes) {
    constexpr size_t kChunk = size_t{64} << 20;
    bytes = round_up_64(bytes);
    if (bytes > kChunk) return chunks_.emplace_back(bytes).data();  // its own; the current chunk stays open
    if (chunks_.empty() || used_ + bytes > chunks_.back().size() || chunks_.back().size() != kChunk) {
        chunks_.emplace_back(kChunk);
        used_ = 0;
    }
    uint8_t* p = chunks_.back().data() + used_;
    used_ += bytes;
    return p;
}

bool gguf_matrix_type_supported(GgmlType type) {
    return type == GgmlType::f32 || type == GgmlType::f16 || type == GgmlType::bf16 || find_relayout(type);
}

std::string gguf_matrix_type_names() {
    std::string names = "F32, F16, BF16";
    for (const Relayout& r : kRelayouts) names += ", " + std::string(ggml_type_info(r.type).name);
    return names;
}

WeightMatrix gguf_weight_matrix(const GgufFile& file, const GgufTensor& tensor, int64_t rows, int64_t cols,
                                const std::vector<int64_t>* row_order, QuantLayout quant_layout, WeightArena& arena) {
    const GgmlTypeInfo& info = ggml_type_info(tensor.type);
    const size_t row_bytes = static_cast<size_t>(cols / info.block_values * info.block_bytes);
    auto source_row = [&](int64_t r) { return tensor.data + static_cast<size_t>(row_order ? (*row_order)[static_cast<size_t>(r)] : r) * row_bytes; };
    WeightMatrix m;
    m.rows = rows;
    m.cols = cols;

    if (tensor.type == GgmlType::f32 || tensor.type == GgmlType::f16 || tensor.type == GgmlType::bf16) {
        m.dtype = tensor.type == GgmlType::f16 ? WeightDtype::f16 : WeightDtype::f32;
        if (tensor.type != GgmlType::bf16 && !row_order) {
            m.data = tensor.data;
            return m;
        }
        const size_t out_row = static_cast<size_t>(cols) * (m.dtype == WeightDtype::f16 ? 2 : 4);
        uint8_t* copy = arena.allocate(out_row * static_cast<size_t>(rows));
        for (int64_t r = 0; r < rows; ++r) {
            uint8_t* to = copy + static_cast<size_t>(r) * out_row;
            if (tensor.type != GgmlType::bf16) {
                std::memcpy(to, source_row(r), out_row);
                continue;
            }
            // bf16 is the top half of an fp32: widening is exact.
            const uint8_t* from = source_row(r);
            for (int64_t j = 0; j < cols; ++j) {
                const uint32_t bits = uint32_t{half_at(from + 2 * j)} << 16;
                std::memcpy(to + 4 * j, &bits, 4);
            }
        }
        m.data = copy;
        file.release_pages(tensor.data, tensor.nbytes);
        return m;
    }

    const Relayout* r = find_relayout(tensor.type);
    if (!r)
        throw Error("GGUF file '" + file.path() + "': tensor '" + tensor.name + "' is " + std::string(info.name) +
                    ", a type kvx does not run (it runs " + gguf_matrix_type_names() + ")");
    QuantMatrix& q = m.quant;
    q.bits = r->bits;
    q.block = r->block;
    q.padded_cols = static_cast<int32_t>(quant_padded_cols(cols, r->block));
    q.offset = r->offset;
    q.scale_type = r->scales;
    q.six_bit_values = r->six_bit_values;
    q.layout = QuantLayout::rows;
    // As llama.cpp rounds the activations for the type's dot products: Q8_K for the K-quants and IQ4_XS, Q8_0
    // (Q8_1 for Q4_1 and Q5_1, the same integers and scale) for the others.
    q.x_rounding = info.block_values == 256 ? QuantXRounding::ggml_k : QuantXRounding::ggml;
    m.dtype = r->bits == 4 ? WeightDtype::q4 : WeightDtype::q8;
    // Every GGUF row is a whole number of blocks of 32 or 256, so padded_cols == cols: nothing to pad; a type
    // with bases has blocks of 256, one base each.
    const size_t q_row = static_cast<size_t>(q.padded_cols) * static_cast<size_t>(q.bits) / 8;
    const size_t table_row = static_cast<size_t>(q.padded_cols / q.block) * quant_scale_bytes(q.scale_type);
    const auto bases_row = static_cast<size_t>(q.padded_cols / kQuantSuperBlock);  // fp16 entries
    // The rows-layout tables of n rows at `table` (integers, scales, minimums, bases, each on its own cache line).
    auto rows_bytes = [&](int64_t n) {
        const QuantTableBytes t = quant_table_bytes(q, n);
        return round_up_64(t.q) + round_up_64(t.scales) + round_up_64(t.offsets) + round_up_64(t.scale_bases) + t.min_bases;
    };
    auto tables_at = [&](int64_t n, uint8_t* table) {
        const QuantTableBytes t = quant_table_bytes(q, n);
        uint8_t* scales = table + round_up_64(t.q);
        uint8_t* bases = scales + round_up_64(t.scales) + round_up_64(t.offsets);
        return RowTables{table, scales, t.offsets ? scales + round_up_64(t.scales) : nullptr,
                         t.scale_bases ? reinterpret_cast<uint16_t*>(bases) : nullptr,
                         t.min_bases ? reinterpret_cast<uint16_t*>(bases + round_up_64(t.scale_bases)) : nullptr};
    };
    auto reading = [&](const RowTables& t) {
        QuantMatrix w = q;
        w.q = t.q;
        w.scales = t.scales;
        w.offsets = t.mins;
        w.scale_bases = t.scale_bases;
        w.min_bases = t.min_bases;
        return w;
    };
    // Rows [first, first + n) of the tensor into rows [to, to + n) of the tables t, on every core, as the decode
    // of a 3B model's blocks took 2.5 s of a 7 s load on one. Then the file's pages of those rows go back where
    // they lie in order (a Q/K permutation leaves them to the end): the pages of a matrix being converted stayed
    // resident beside its copy until it was done, the load's peak.
    auto relayout_rows = [&](int64_t first, int64_t n, const RowTables& t, int64_t to) {
        auto offset = [&](auto* table, size_t entries, int64_t row) {
            return table ? table + static_cast<size_t>(row) * entries : nullptr;
        };
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
        for (int64_t row = 0; row < n; ++row)
            relayout_row(*r, info, source_row(first + row), cols,
                         {offset(t.q, q_row, to + row), offset(t.scales, table_row, to + row), offset(t.mins, table_row, to + row),
                          offset(t.scale_bases, bases_row, to + row), offset(t.min_bases, bases_row, to + row)});
        if (!row_order) file.release_pages(source_row(first), static_cast<size_t>(n) * row_bytes);
    };
    // A slab of rows at a time: kRelayoutSlabBytes of kvx's tables, whole row groups.
    const int64_t slab_rows = std::max<int64_t>(
        kQuantGroupRows, static_cast<int64_t>(kRelayoutSlabBytes / rows_bytes(kQuantGroupRows)) * kQuantGroupRows);
    if (quant_layout != QuantLayout::row_groups || !row_groups_fit(q)) {
        const RowTables t = tables_at(rows, arena.allocate(rows_bytes(rows)));
        for (int64_t first = 0; first < rows; first += slab_rows) relayout_rows(first, std::min(slab_rows, rows - first), t, first);
        q = reading(t);
    } else {
        // Into row groups through a scratch of one slab in the rows layout: a whole matrix's scratch held a second
        // copy of it at the load's peak (Gemma 3's 262,144-row classifier, 210 MB, was the difference between
        // kvx's peak RSS and its steady one). Uninitialised (new[], not a vector): every byte that is read is
        // written first.
        const int64_t scratch_rows = std::min(rows, slab_rows);
        std::unique_ptr<uint64_t[]> scratch(new uint64_t[(rows_bytes(scratch_rows) + 7) / 8]);
        const RowTables slab_tables = tables_at(scratch_rows, reinterpret_cast<uint8_t*>(scratch.get()));
        const QuantMatrix slab = reading(slab_tables);
        uint8_t* groups = arena.allocate(row_groups_bytes(q, rows));
        for (int64_t first = 0; first < rows; first += slab_rows) {
            const int64_t n = std::min(slab_rows, rows - first);
            relayout_rows(first, n, slab_tables, 0);
            copy_row_groups(slab, rows, groups, first, first + n);
        }
        q = row_groups_copy_at(q, rows, groups);
    }
    m.data = q.q;
    file.release_pages(tensor.data, tensor.nbytes);
    return m;
}

}  // namespace kvx
