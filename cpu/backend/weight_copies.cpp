#include "cpu/backend/weight_copies.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "engine/model/row_group_copy.h"
#include "kernels/error.h"
#include "kernels/f16_row_groups.h"
#include "kernels/quant_row_groups.h"

namespace kvx::cpu {
namespace {

// Each copy starts on a cache line, as the mapping's tensors need not.
constexpr size_t kCopyAlign = 64;
// How much of a matrix is copied before the mapping's pages of it are given back.
constexpr size_t kReleasePieceBytes = size_t{8} << 20;

size_t aligned(size_t bytes) { return (bytes + kCopyAlign - 1) / kCopyAlign * kCopyAlign; }

size_t float_bytes(const WeightMatrix& w) {
    return static_cast<size_t>(w.rows * w.cols) * (w.dtype == WeightDtype::f16 ? 2 : 4);
}

bool in_row_groups(const WeightMatrix& w, const KernelTable& kernels) {
    if (w.dtype == WeightDtype::f16) return kernels.matmul_f16_row_groups;
    return w.quantized() && kernels.matmul_q_layout == QuantLayout::row_groups && row_groups_fit(w.quant);
}

size_t f16_groups_bytes(const WeightMatrix& w) { return f16_row_groups_elems(w.rows, w.cols) * sizeof(uint16_t); }

// Copies rows [0, rows) of a matrix of row_bytes per row in the mapping, in pieces of about kReleasePieceBytes
// and whole groups of group_rows rows: copy(first, end) copies rows [first, end), then release(first, end)
// gives their pages in the mapping back, and release(0, rows) at the end those that straddled two pieces. So
// no matrix is held whole beside its copy: copied whole, the last one (a tied classifier, 113 MB of an F32
// SmolLM2) was held twice at the load's peak.
template <class Copy, class Release>
void copy_in_pieces(int64_t rows, size_t row_bytes, int64_t group_rows, Copy copy, Release release) {
    const auto piece_groups = static_cast<int64_t>(kReleasePieceBytes / std::max<size_t>(row_bytes, 1)) / group_rows;
    const int64_t piece_rows = std::max<int64_t>(1, piece_groups) * group_rows;
    for (int64_t first = 0; first < rows; first += piece_rows) {
        const int64_t end = std::min(rows, first + piece_rows);
        copy(first, end);
        release(first, end);
    }
    release(0, rows);
}

// Gives back the mapping's pages of rows [first, end) of each of w's tables (rows layout, `rows` rows).
void release_quant_rows(const Model& model, const QuantMatrix& w, int64_t rows, int64_t first, int64_t end) {
    const QuantTableBytes t = quant_table_bytes(w, rows);
    auto release = [&](const void* table, size_t bytes) {
        if (!table) return;
        const size_t row = bytes / static_cast<size_t>(rows);
        model.release_pages(static_cast<const uint8_t*>(table) + static_cast<size_t>(first) * row,
                            static_cast<size_t>(end - first) * row);
    };
    release(w.q, t.q);
    release(w.scales, t.scales);
    release(w.offsets, t.offsets);
    release(w.scale_bases, t.scale_bases);
    release(w.min_bases, t.min_bases);
}

// The bytes of w's copy, each table on its own cache line.
size_t copy_bytes(const WeightMatrix& w, const KernelTable& kernels) {
    if (w.dtype == WeightDtype::f16 && in_row_groups(w, kernels)) return aligned(f16_groups_bytes(w));
    if (!w.quantized()) return aligned(float_bytes(w));
    if (in_row_groups(w, kernels)) return aligned(row_groups_bytes(w.quant, w.rows));
    const QuantTableBytes t = quant_table_bytes(w.quant, w.rows);
    return aligned(t.q) + aligned(t.scales) + aligned(t.offsets) + aligned(t.scale_bases) + aligned(t.min_bases);
}

// The matrices to copy, each once, in the order a forward pass reads them. A matrix the model filled itself (a
// GGUF's, in kvx's layout on huge pages) is read in place unless the kernels want another layout.
std::vector<const WeightMatrix*> streamed_matrices(const Model& model, const KernelTable& kernels) {
    std::vector<const WeightMatrix*> out;
    auto add = [&](const WeightMatrix& w) {
        if (w.data == nullptr || w.rows == 0) return;  // an absent w_gate
        if (model.owns(w.data) && !in_row_groups(w, kernels)) return;
        for (const WeightMatrix* seen : out)
            if (seen->data == w.data) return;
        out.push_back(&w);
    };
    for (const LayerWeights& layer : model.layers)
        for (const Linear* linear : layer.linears()) add(linear->weight);
    add(model.classifier);
    return out;
}

}  // namespace

WeightCopies::WeightCopies(const Model& model, const KernelTable& kernels) {
    const std::vector<const WeightMatrix*> matrices = streamed_matrices(model, kernels);
    size_t total = 0;
    for (const WeightMatrix* w : matrices) total += copy_bytes(*w, kernels);
    try {
        memory_ = HugePageBuffer(total);
    } catch (const Error& e) {
        throw Error(std::string("the weights' copy in huge pages: ") + e.what());
    }
    uint8_t* at = memory_.data();
    // Copies bytes from the mapping to `at`, giving the mapping's pages back a piece at a time, and returns where
    // the copy is.
    auto move = [&](const void* from, size_t bytes) {
        uint8_t* to = at;
        const auto* source = static_cast<const uint8_t*>(from);
        copy_in_pieces(
            static_cast<int64_t>(bytes), 1, 1,
            [&](int64_t first, int64_t end) { std::memcpy(to + first, source + first, static_cast<size_t>(end - first)); },
            [&](int64_t first, int64_t end) { model.release_pages(source + first, static_cast<size_t>(end - first)); });
        at += aligned(bytes);
        return to;
    };
    for (const WeightMatrix* w : matrices) {
        if (w->dtype == WeightDtype::f16 && in_row_groups(*w, kernels)) {
            auto* copy = reinterpret_cast<uint16_t*>(at);
            const uint16_t* rows = w->f16();
            const int64_t cols = w->cols;
            copy_in_pieces(
                w->rows, static_cast<size_t>(cols) * 2, kF16GroupRows,
                [&](int64_t first, int64_t end) {
                    copy_to_f16_row_groups(rows + first * cols, end - first, cols, copy + f16_row_groups_elems(first, cols));
                },
                [&](int64_t first, int64_t end) {
                    model.release_pages(rows + first * cols, static_cast<size_t>((end - first) * cols) * 2);
                });
            f16_groups_.emplace(w->data, copy);
            at += aligned(f16_groups_bytes(*w));
            continue;
        }
        if (!w->quantized()) {
            floats_.emplace(w->data, move(w->data, float_bytes(*w)));
            continue;
        }
        const QuantTableBytes t = quant_table_bytes(w->quant, w->rows);
        QuantMatrix copy = w->quant;
        if (in_row_groups(*w, kernels)) {
            copy_in_pieces(
                w->rows, t.total() / static_cast<size_t>(w->rows), kQuantGroupRows,
                [&](int64_t first, int64_t end) { copy_row_groups(w->quant, w->rows, at, first, end); },
                [&](int64_t first, int64_t end) { release_quant_rows(model, w->quant, w->rows, first, end); });
            copy = row_groups_copy_at(w->quant, w->rows, at);
            at += aligned(row_groups_bytes(w->quant, w->rows));
        } else {
            copy.q = move(w->quant.q, t.q);
            copy.scales = move(w->quant.scales, t.scales);
            if (w->quant.offsets) copy.offsets = move(w->quant.offsets, t.offsets);
            if (w->quant.scale_bases) copy.scale_bases = reinterpret_cast<const uint16_t*>(move(w->quant.scale_bases, t.scale_bases));
            if (w->quant.min_bases) copy.min_bases = reinterpret_cast<const uint16_t*>(move(w->quant.min_bases, t.min_bases));
        }
        quants_.emplace(w->quant.q, copy);
    }
}

const void* WeightCopies::data(const WeightMatrix& w) const {
    const auto found = floats_.find(w.data);
    return found == floats_.end() ? w.data : found->second;
}

const uint16_t* WeightCopies::f16_groups(const WeightMatrix& w) const {
    const auto found = f16_groups_.find(w.data);
    return found == f16_groups_.end() ? nullptr : found->second;
}

const QuantMatrix& WeightCopies::quant(const WeightMatrix& w) const {
    const auto found = quants_.find(w.quant.q);
    return found == quants_.end() ? w.quant : found->second;
}

}  // namespace kvx::cpu
