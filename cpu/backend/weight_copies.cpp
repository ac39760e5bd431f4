#include "cpu/backend/weight_copies.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

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
    // the copy is. In pieces: copied whole, the last matrix (a tied classifier, 113 MB of an F32 SmolLM2) was
    // held twice at the load's peak.
    auto move = [&](const void* from, size_t bytes) {
        uint8_t* to = at;
        for (size_t done = 0; done < bytes;) {
            const size_t piece = std::min(bytes - done, kReleasePieceBytes);
            std::memcpy(to + done, static_cast<const uint8_t*>(from) + done, piece);
            model.release_pages(static_cast<const uint8_t*>(from) + done, piece);
            done += piece;
        }
        model.release_pages(from, bytes);  // the pages that straddled two pieces
        at += aligned(bytes);
        return to;
    };
    for (const WeightMatrix* w : matrices) {
        if (w->dtype == WeightDtype::f16 && in_row_groups(*w, kernels)) {
            // Whole row groups a piece at a time, each piece's pages given back after it, as move does.
            auto* copy = reinterpret_cast<uint16_t*>(at);
            const int64_t row_bytes = w->cols * 2;
            const int64_t piece_rows = std::max<int64_t>(
                kF16GroupRows, static_cast<int64_t>(kReleasePieceBytes) / row_bytes / kF16GroupRows * kF16GroupRows);
            for (int64_t r = 0; r < w->rows; r += piece_rows) {
                const int64_t n = std::min(piece_rows, w->rows - r);
                copy_to_f16_row_groups(w->f16() + r * w->cols, n, w->cols, copy + f16_row_groups_elems(r, w->cols));
                model.release_pages(w->f16() + r * w->cols, static_cast<size_t>(n * row_bytes));
            }
            f16_groups_.emplace(w->data, copy);
            at += aligned(f16_groups_bytes(*w));
            model.release_pages(w->data, float_bytes(*w));
            continue;
        }
        if (!w->quantized()) {
            floats_.emplace(w->data, move(w->data, float_bytes(*w)));
            continue;
        }
        const QuantTableBytes t = quant_table_bytes(w->quant, w->rows);
        QuantMatrix copy = w->quant;
        if (in_row_groups(*w, kernels)) {
            // Group by group on every core: the first touch of a model's weights.
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
            for (int64_t g = 0; g < row_group_count(w->rows); ++g) copy_row_group(w->quant, w->rows, at, g);
            copy = row_groups_copy_at(w->quant, w->rows, at);
            at += aligned(row_groups_bytes(w->quant, w->rows));
            model.release_pages(w->quant.q, t.q);
            model.release_pages(w->quant.scales, t.scales);
            if (w->quant.offsets) model.release_pages(w->quant.offsets, t.offsets);
            if (w->quant.scale_bases) model.release_pages(w->quant.scale_bases, t.scale_bases);
            if (w->quant.min_bases) model.release_pages(w->quant.min_bases, t.min_bases);
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
