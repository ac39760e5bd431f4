// The KV cache ops of the table: kv_append (fp32 and fp16 caches), paged_attention (fp32 and fp16 caches,
// windows, soft-caps, GQA, prefill chunks beside decode rows) and copy_blocks.
#include <numeric>
#include <string>

#include "tests/kernel_ops/op_inputs.h"
#include "tests/kernel_ops/op_table.h"

namespace kvx::ops {
namespace {

const KernelTable& reference = reference_kernels();

bool f16(const Shape& s) { return s.kv_dtype == KvDtype::f16; }

// Rows go to shuffled slots of a 5-block cache that starts random, every third row to slot -1. The whole
// caches must equal the reference's: every slot no row names untouched, the rest written (fp16: rounded as
// f32_to_f16, ties, subnormals, overflow to inf and NaN included).
template <class T>
Verdict check_kv_append(const Implementation& impl, const Shape& s, uint32_t seed) {
    const int n_slots = 5 * s.block_size, n_rows = std::min(6, n_slots);
    const size_t row_elems = static_cast<size_t>(s.kv_heads * s.head_dim);
    const size_t cache_elems = static_cast<size_t>(n_slots) * row_elems;  // [5][kv_heads][block_size][head_dim]
    std::vector<int64_t> slots(static_cast<size_t>(n_slots));              // [n_rows] once cut
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), std::mt19937(seed));
    slots.resize(static_cast<size_t>(n_rows));
    for (size_t r = 1; r < slots.size(); r += 3) slots[r] = -1;
    const Placed<float> k(values_with_f16_specials(static_cast<size_t>(n_rows) * row_elems, seed + 1), s.misaligned);
    const Placed<float> v(values_with_f16_specials(static_cast<size_t>(n_rows) * row_elems, seed + 2), s.misaligned);
    auto initial = [&](uint32_t at) {
        if constexpr (std::is_same_v<T, float>) return random_floats(cache_elems, at);
        else return to_f16(random_floats(cache_elems, at));
    };
    std::vector<T> want_k = initial(seed + 3), want_v = initial(seed + 4), got_k = want_k, got_v = want_v;
    if constexpr (std::is_same_v<T, float>) {
        reference.kv_append(want_k.data(), want_v.data(), k.data(), v.data(), slots.data(), n_rows, s.kv_heads, s.head_dim, s.block_size);
        impl.table.kv_append(got_k.data(), got_v.data(), k.data(), v.data(), slots.data(), n_rows, s.kv_heads, s.head_dim, s.block_size);
    } else {
        reference.kv_append_f16(want_k.data(), want_v.data(), k.data(), v.data(), slots.data(), n_rows, s.kv_heads, s.head_dim,
                                s.block_size);
        impl.table.kv_append_f16(got_k.data(), got_v.data(), k.data(), v.data(), slots.data(), n_rows, s.kv_heads, s.head_dim,
                                 s.block_size);
    }
    return first_failure({same_bits(got_k, want_k, "k cache"), same_bits(got_v, want_v, "v cache")});
}

std::vector<Shape> kv_append_shapes() {
    std::vector<Shape> shapes;
    auto add = [&](int kv_heads, int head_dim, int block_size, bool misaligned = false, const std::string& note = "") {
        shapes.push_back({.label = "kv heads " + std::to_string(kv_heads) + " head_dim " + std::to_string(head_dim) +
                                   " block_size " + std::to_string(block_size) + (misaligned ? " misaligned" : "") +
                                   (note.empty() ? "" : " (" + note + ")"),
                          .kv_heads = kv_heads, .head_dim = head_dim, .block_size = block_size, .misaligned = misaligned});
    };
    for (int kv_heads : {1, 3, 8})
        for (int head_dim : {6, 7, 8, 13, 64, 80, 100, 128, 256})
            for (int block_size : {1, 4, 5, 16, 256}) add(kv_heads, head_dim, block_size);
    add(2, 80, 5, true);
    add(3, 64, 16, true);
    add(3, 64, 16, false, "SmolLM2-135M");
    add(1, 256, 16, false, "Gemma 3 270M");
    return shapes;
}

// The batch on impl and on the reference, reading the same cache values (fp16: widened exactly on both sides).
Verdict check_paged_attention(const Implementation& impl, const Shape& s, uint32_t seed) {
    const AttentionBatch batch(s.heads, s.kv_heads, s.head_dim, s.block_size, s.lengths, s.rows_of, s.window, seed);
    const std::vector<float>& want = oracle_once("paged_attention", s, seed, [&] {
        std::vector<float> out = nan_filled(batch.q.size());  // [n_rows][heads][head_dim]
        reference.paged_attention(batch.args(s.kv_dtype, s.softcap, out.data()));
        return out;
    });
    std::vector<float> got = nan_filled(batch.q.size());  // [n_rows][heads][head_dim]
    impl.table.paged_attention(batch.args(s.kv_dtype, s.softcap, got.data()));
    return compare("paged_attention", impl, got, want);
}

std::string list(const std::vector<int>& v) {
    std::string out;
    for (int x : v) {
        if (!out.empty()) out.push_back(',');
        out.append(std::to_string(x));
    }
    return out;
}

std::vector<Shape> attention_shapes() {
    std::vector<Shape> shapes;
    auto add = [&](Shape s, const std::string& note = "") {
        s.label = "heads " + std::to_string(s.heads) + "/" + std::to_string(s.kv_heads) + " head_dim " + std::to_string(s.head_dim) +
                  " block_size " + std::to_string(s.block_size) + " lengths " + list(s.lengths) + " rows " + list(s.rows_of) +
                  (s.window ? " window " + std::to_string(s.window) : "") +
                  (s.softcap != 0.0f ? " softcap " + std::to_string(s.softcap) : "") + (f16(s) ? " fp16 cache" : "") +
                  (note.empty() ? "" : " (" + note + ")");
        shapes.push_back(s);
    };
    for (KvDtype dtype : {KvDtype::f32, KvDtype::f16}) {
        // Every head_dim path and block size; lengths straddle block and key-chunk (32, 64) boundaries, one
        // sequence has a single key, sequence 0 a 5-row prefill chunk.
        for (int head_dim : {8, 24, 64, 80, 128, 256})
            for (int block_size : {1, 3, 16, 64, 256})
                add({.heads = 4, .kv_heads = 2, .head_dim = head_dim, .block_size = block_size, .lengths = {150, 1, 67, 300},
                     .rows_of = {5, 1, 1, 1}, .kv_dtype = dtype});
        // GQA: MHA, 9 heads over 3, 4 over 1, Llama's 4, MQA whose 32 heads span two CUDA tiles.
        for (auto [heads, kv_heads] : {std::pair{4, 4}, {9, 3}, {4, 1}, {8, 2}, {32, 1}})
            for (int head_dim : {64, 80})
                add({.heads = heads, .kv_heads = kv_heads, .head_dim = head_dim, .block_size = 16, .lengths = {90, 33, 4, 129, 64},
                     .rows_of = {7, 1, 1, 1, 1}, .kv_dtype = dtype});
        // Sliding windows whose start falls on, just past and inside blocks; positions before them poisoned.
        for (int block_size : {1, 16, 64})
            for (int window : {1, 2, 37, 64, 65, 2 * block_size + 1})
                add({.heads = 4, .kv_heads = 2, .head_dim = 24, .block_size = block_size, .lengths = {150, 1, 67, 300, 8 * block_size},
                     .rows_of = {5, 1, 1, 1, 1}, .window = window, .kv_dtype = dtype});
        // A 40-row prefill chunk with a window: its rows' windows start at 40 different positions.
        add({.heads = 8, .kv_heads = 2, .head_dim = 80, .block_size = 16, .lengths = {200, 5, 129, 48}, .rows_of = {40, 1, 1, 1},
             .window = 48, .kv_dtype = dtype});
        // Soft-caps that bend nearly every score (0.5), the larger ones (2), hardly any (50, Gemma 2's).
        for (float cap : {0.5f, 2.0f, 50.0f}) {
            add({.heads = 4, .kv_heads = 2, .head_dim = 64, .block_size = 16, .lengths = {37, 1, 150, 65}, .rows_of = {1, 1, 1, 1},
                 .softcap = cap, .kv_dtype = dtype});
            add({.heads = 9, .kv_heads = 3, .head_dim = 80, .block_size = 1, .lengths = {85, 20, 130}, .rows_of = {40, 1, 1},
                 .window = 37, .softcap = cap, .kv_dtype = dtype});
        }
        // Odd head dims: the scalar loads.
        for (int head_dim : {6, 13, 100})
            add({.heads = 6, .kv_heads = 2, .head_dim = head_dim, .block_size = 16, .lengths = {70, 3, 200}, .rows_of = {9, 1, 1},
                 .kv_dtype = dtype});
        // One long decode row beside short ones: the CUDA kernel splits it into partitions.
        add({.heads = 8, .kv_heads = 2, .head_dim = 128, .block_size = 16, .lengths = {3000, 17, 700}, .rows_of = {1, 1, 1},
             .kv_dtype = dtype}, "long context");
        // Keys in several segments of 256 (cpu/kernels/attention_schedule.inc): a prompt chunk whose rows share
        // them in tiles beside a decode row split over the threads, with and without a window that moves each
        // row's segments.
        for (int window : {0, 300})
            add({.heads = 8, .kv_heads = 2, .head_dim = 64, .block_size = 16, .lengths = {1100, 530}, .rows_of = {40, 1},
                 .window = window, .kv_dtype = dtype}, "a prompt chunk over several key segments");
        add({.heads = 9, .kv_heads = 3, .head_dim = 64, .block_size = 16, .lengths = {200}, .rows_of = {1}, .kv_dtype = dtype},
            "SmolLM2-135M decode");
        add({.heads = 9, .kv_heads = 3, .head_dim = 64, .block_size = 16, .lengths = {70, 300}, .rows_of = {70, 1},
             .kv_dtype = dtype}, "SmolLM2-135M prompt from position 0 beside a decode row");
        add({.heads = 4, .kv_heads = 1, .head_dim = 256, .block_size = 16, .lengths = {700, 40}, .rows_of = {1, 1},
             .window = 512, .kv_dtype = dtype}, "Gemma 3 270M decode, local layer");
        add({.heads = 4, .kv_heads = 1, .head_dim = 256, .block_size = 16, .lengths = {90, 600}, .rows_of = {33, 1},
             .kv_dtype = dtype}, "Gemma 3 270M prefill chunk, global layer");
    }
    return shapes;
}

// Pairs of shuffled blocks, sources and destinations disjoint, one source forked twice, over caches of
// random bytes (K unlike V); the whole caches must be the reference's.
Verdict check_copy_blocks(const Implementation& impl, const Shape& s, uint32_t seed) {
    const int n_pairs = s.n, elem_bytes = s.k;
    const int64_t block_elems = s.length;
    const int num_blocks = 2 * n_pairs + 3;
    std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
    std::vector<BlockCopy> pairs;
    for (int i = 0; i < n_pairs; ++i) pairs.push_back({ids[static_cast<size_t>(i)], ids[static_cast<size_t>(n_pairs + i)]});
    if (n_pairs > 1) pairs[1].src = pairs[0].src;
    const size_t bytes = static_cast<size_t>(num_blocks) * static_cast<size_t>(block_elems) * static_cast<size_t>(elem_bytes);
    std::vector<uint8_t> want_k = random_bytes(bytes, seed + 1), want_v = random_bytes(bytes, seed + 2);
    // The caches' base `param` bytes past a 16-byte boundary: the CUDA kernel's 16-, 4- and 1-byte copy units.
    Placed<uint8_t> k(want_k, static_cast<int>(s.param)), v(want_v, static_cast<int>(s.param));
    reference.copy_blocks(want_k.data(), want_v.data(), pairs.data(), n_pairs, block_elems, elem_bytes);
    impl.table.copy_blocks(k.data(), v.data(), pairs.data(), n_pairs, block_elems, elem_bytes);
    return first_failure({same_bits(k.values(), want_k, "k cache"), same_bits(v.values(), want_v, "v cache")});
}

std::vector<Shape> copy_blocks_shapes() {
    std::vector<Shape> shapes;
    auto add = [&](int n_pairs, int elem_bytes, int64_t block_elems, int base_offset) {
        shapes.push_back({.label = "pairs " + std::to_string(n_pairs) + " elem_bytes " + std::to_string(elem_bytes) +
                                   " block_elems " + std::to_string(block_elems) + " base offset " + std::to_string(base_offset),
                          .n = n_pairs, .k = elem_bytes, .length = block_elems, .param = static_cast<float>(base_offset)});
    };
    for (int elem_bytes : {2, 4})
        for (int64_t block_elems : {int64_t{1}, int64_t{6}, int64_t{15}, int64_t{24}, int64_t{16 * 8 * 128}})
            for (int n_pairs : {0, 1, 7, 40}) add(n_pairs, elem_bytes, block_elems, 0);
    for (int base_offset : {2, 4}) add(5, 4, 8, base_offset);
    add(5, 2, 64, 2);
    add(5, 2, 3 * 16 * 64, 0);  // SmolLM2-135M, fp16 cache, block 16: kv heads 3 x 16 x head_dim 64
    return shapes;
}

}  // namespace

std::vector<Op> cache_ops() {
    return {
        {"kv_append", kv_append_shapes(), [](const Implementation& impl, const Shape&) { return impl.table.kv_append != nullptr; },
         check_kv_append<float>},
        {"kv_append_f16", kv_append_shapes(),
         [](const Implementation& impl, const Shape&) { return impl.table.kv_append_f16 != nullptr; }, check_kv_append<uint16_t>},
        {"paged_attention", attention_shapes(),
         [](const Implementation& impl, const Shape&) { return impl.table.paged_attention != nullptr; }, check_paged_attention},
        {"copy_blocks", copy_blocks_shapes(),
         [](const Implementation& impl, const Shape&) { return impl.table.copy_blocks != nullptr; }, check_copy_blocks},
    };
}

}  // namespace kvx::ops
