#include "cpu/backend/weight_copies.h"

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
    return aligned(t.q) + aligned(t.scales) + aligned(t.offsets);
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
    // Copies bytes from the mapping to `at`, gives the mapping's pages back, and returns where the copy is.
    auto move = [&](const void* from, size_t bytes) {
        uint8_t* to = at;
        if (bytes > 0) std::memcpy(to, from, bytes);
        if (model.weights) model.weights->release_pages(from, bytes);
        at += aligned(bytes);
        return to;
    };
    for (const WeightMatrix* w : matrices) {
        if (w->dtype == WeightDtype::f16 && in_row_groups(*w, kernels)) {
            auto* copy = reinterpret_cast<uint16_t*>(at);
            copy_to_f16_row_groups(w->f16(), w->rows, w->cols, copy);
            f16_groups_.emplace(w->data, copy);
            at += aligned(f16_groups_bytes(*w));
            if (model.weights) model.weights->release_pages(w->data, float_bytes(*w));
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
            if (model.weights) {
                model.weights->release_pages(w->quant.q, t.q);
                model.weights->release_pages(w->quant.scales, t.scales);
                if (w->quant.offsets) model.weights->release_pages(w->quant.offsets, t.offsets);
            }
        } else {
            copy.q = move(w->quant.q, t.q);
            copy.scales = move(w->quant.scales, t.scales);
            if (w->quant.offsets) copy.offsets = move(w->quant.offsets, t.offsets);
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
