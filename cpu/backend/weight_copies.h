// The matrices a forward pass streams from DRAM, every layer's linears and the classifier, copied once at
// load time into one HugePageBuffer, in the order a forward pass reads them: as stored, except where the
// kernels read another layout faster: fp16 into row groups (KernelTable::matmul_f16_row_groups,
// kernels/f16_row_groups.h), and q4 and q8 in blocks of 32 (the format's zero or a minimum per block) into
// their row groups (KernelTable::matmul_q_layout, kernels/quant_row_groups.h). Each matrix's pages in the
// model's mapping (a folder's or a GGUF file's) are given back as it is copied, 8 MiB at a time, so the
// process holds the weights once. A GGUF model's block matrices are already in kvx's layout on huge pages
// (engine/model/gguf_matrix.h), and in row groups where they fit when loaded for these kernels (load_model's
// quant_layout, as the CLI loads them): they are read in place. Loaded in rows (a test's load_gguf_model),
// those that fit are copied into row groups and held twice: the model's memory is not a file to fault back
// from, and a tied embedding is read from it.
//
// Why copies: the mapping is backed by 4 KiB pages, and a decode step's stream of weights then pays a TLB miss
// every 4 KiB (huge_page_buffer.h has the figures); the row groups are layouts of their own, read as one
// stream. Left in place: the embedding, of which a step reads a few rows (a tied
// classifier's copy is a second one, read by the classifier alone).
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>

#include "cpu/backend/huge_page_buffer.h"
#include "engine/model/model.h"
#include "kernels/kernels.h"
#include "kernels/quant_matrix.h"

namespace kvx::cpu {

class WeightCopies {
public:
    // Throws kvx::Error when the memory for the copies cannot be had.
    WeightCopies(const Model& model, const KernelTable& kernels);

    // w's fp32 or fp16 elements as the kernels read them in rows: the copy's (w's own for a matrix that is
    // not one of the model's linears or classifier), unless the copy is in row groups.
    const void* data(const WeightMatrix& w) const;
    // w's fp16 copy in row groups [ceil(rows / 8)][ceil(cols / 16)][8][16], or null where it has none.
    const uint16_t* f16_groups(const WeightMatrix& w) const;
    // w's integers, scales and offsets as the kernels read them, likewise.
    const QuantMatrix& quant(const WeightMatrix& w) const;
    size_t bytes() const { return memory_.size(); }

private:
    HugePageBuffer memory_;
    // By the model's pointer each copy was made from: a tied classifier's is the embedding's, which the
    // embedding lookup still reads in place.
    std::unordered_map<const void*, const void*> floats_;
    std::unordered_map<const void*, const uint16_t*> f16_groups_;
    std::unordered_map<const uint8_t*, QuantMatrix> quants_;
};

}  // namespace kvx::cpu
