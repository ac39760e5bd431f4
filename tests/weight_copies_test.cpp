// The CPU backend's weight copies (cpu/backend/weight_copies.h): every streamed matrix is copied whole into huge
// pages, the mapping's pages are given back without losing a byte, and nothing outside a mapping is touched.
#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "cpu/backend/huge_page_buffer.h"
#include "cpu/backend/weight_copies.h"
#include "cpu/kernels/cpu_kernels.h"
#include "engine/files/mapped_file.h"
#include "fixtures.h"
#include "kernels/f16_row_groups.h"

using namespace kvx;
using namespace kvx::test;

namespace {

size_t matrix_bytes(const WeightMatrix& w) {
    return static_cast<size_t>(w.rows * w.cols) * (w.dtype == WeightDtype::f16 ? 2 : 4);
}

}  // namespace

TEST_CASE("HugePageBuffer: zeroed bytes on a 2 MiB boundary, handed over by a move") {
    cpu::HugePageBuffer a(3 * 1000 * 1000);
    REQUIRE(a.size() == 3 * 1000 * 1000);
    CHECK(reinterpret_cast<uintptr_t>(a.data()) % (size_t{2} << 20) == 0);
    std::vector<uint8_t> zeros(a.size(), 0);
    CHECK(std::memcmp(a.data(), zeros.data(), a.size()) == 0);
    a.data()[a.size() - 1] = 7;
    cpu::HugePageBuffer b(std::move(a));
    CHECK(a.data() == nullptr);
    CHECK(a.size() == 0);
    CHECK(b.data()[b.size() - 1] == 7);
    CHECK(cpu::HugePageBuffer(0).data() == nullptr);
}

TEST_CASE("MappedFile::release_pages keeps the file's bytes and leaves memory outside the mapping alone") {
    const long page = ::sysconf(_SC_PAGESIZE);
    const std::filesystem::path path = std::filesystem::temp_directory_path() / ("kvx_release_" + std::to_string(::getpid()));
    std::vector<uint8_t> bytes(static_cast<size_t>(page) * 5 + 123);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 31 + 7);
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    {
        const MappedFile file(path.string());
        REQUIRE(std::memcmp(file.data(), bytes.data(), bytes.size()) == 0);
        file.release_pages(file.data() + 100, static_cast<size_t>(page) * 3);  // pages 1 and 2 wholly inside
        file.release_pages(file.data(), file.size());
        CHECK(std::memcmp(file.data(), bytes.data(), bytes.size()) == 0);  // read again from the file
        // Memory that is not the mapping's: MADV_DONTNEED there would zero anonymous pages.
        cpu::HugePageBuffer other(static_cast<size_t>(page) * 4);
        std::memset(other.data(), 0x5a, other.size());
        file.release_pages(other.data(), other.size());
        file.release_pages(file.data() + 1, file.size());  // runs past the mapping's end: nothing
        CHECK(other.data()[0] == 0x5a);
        CHECK(other.data()[other.size() - 1] == 0x5a);
    }
    std::filesystem::remove(path);
}

TEST_CASE("WeightCopies: every linear and the classifier copied whole, the embedding read in place") {
    for (const char* name : {"rand_hd24_gqa4_l3_v301_untied", "rand_hd24_gqa4_l3_v301_untied_f16", "stories260K"}) {
        const Fixture f = load_fixture(name);
        const Model model = load_model(f.model_dir);
        const cpu::WeightCopies copies(model, reference_kernels());
        INFO(name);
        size_t copied = 0;
        auto check = [&](const WeightMatrix& w) {
            if (w.data == nullptr) return;
            const void* copy = copies.data(w);
            REQUIRE(copy != w.data);
            CHECK(reinterpret_cast<uintptr_t>(copy) % 64 == 0);
            // w.data is the mapping, whose pages were given back: this reads them from the file again.
            CHECK(std::memcmp(copy, w.data, matrix_bytes(w)) == 0);
            copied += matrix_bytes(w);
        };
        for (const LayerWeights& layer : model.layers)
            for (const Linear* linear : layer.linears()) check(linear->weight);
        check(model.classifier);
        CHECK(copies.bytes() >= copied);
        const bool tied = model.classifier.data == model.tok_embeddings.data;
        CHECK((copies.data(model.tok_embeddings) == model.tok_embeddings.data) == !tied);
    }
}

TEST_CASE("WeightCopies: fp16 matrices in row groups for kernels that read them so, every element in its place") {
    const Fixture f = load_fixture("rand_hd24_gqa4_l3_v301_untied_f16");
    const Model model = load_model(f.model_dir);
    const KernelTable& kernels = cpu::cpu_kernels(cpu::SimdLevel::portable);
    REQUIRE(kernels.matmul_f16_row_groups);
    const cpu::WeightCopies copies(model, kernels);
    auto check = [&](const WeightMatrix& w) {
        const uint16_t* groups = copies.f16_groups(w);
        REQUIRE(groups != nullptr);
        const size_t elems = f16_row_groups_elems(w.rows, w.cols);
        std::vector<bool> seen(elems, false);
        for (int64_t r = 0; r < w.rows; ++r)
            for (int64_t l = 0; l < w.cols; ++l) {
                const auto at = static_cast<size_t>(f16_row_groups_index(r, l, w.cols));
                REQUIRE(at < elems);
                REQUIRE(groups[at] == w.f16()[r * w.cols + l]);
                seen[at] = true;
            }
        for (size_t i = 0; i < elems; ++i)
            if (!seen[i]) REQUIRE(groups[i] == 0);  // padding rows and columns add nothing
    };
    for (const LayerWeights& layer : model.layers)
        for (const Linear* linear : layer.linears())
            if (linear->weight.data) check(linear->weight);
    check(model.classifier);
    CHECK(copies.f16_groups(model.tok_embeddings) == nullptr);
}
