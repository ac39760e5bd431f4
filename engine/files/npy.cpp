#include "engine/files/npy.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string_view>

#include "engine/files/regular_file.h"
#include "kernels/error.h"

namespace kvx {
namespace {

// Reference logits of the largest fixtures are tens of MB; a file of more is not one kvx made or wants.
constexpr size_t kMaxNpyBytes = size_t{1} << 30;

// The header is a Python dict literal ("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"). It is read
// by plain string searches rather than std::regex, which made this 90-line file one of the slowest of the
// sanitizer build to compile (20 s) for three patterns.

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

// For each occurrence of key in header, the index just past it and any whitespace, until visit accepts one
// (returns true); whether one was accepted.
template <class Visit>
bool each_value_of(std::string_view header, std::string_view key, Visit visit) {
    for (size_t at = header.find(key); at != std::string_view::npos; at = header.find(key, at + 1)) {
        size_t value = at + key.size();
        while (value < header.size() && is_space(header[value])) ++value;
        if (visit(value)) return true;
    }
    return false;
}

}  // namespace

void write_npy_f32(const std::string& path, std::span<const float> data, const std::vector<int64_t>& shape) {
    std::string dims;
    size_t count = 1;
    for (int64_t d : shape) {
        if (d < 0 || (d > 0 && count > data.size() / static_cast<size_t>(d)))
            throw Error("internal: an array of " + std::to_string(data.size()) + " floats written with shape dimension " +
                        std::to_string(d));
        dims += std::to_string(d) + ", ";
        count *= static_cast<size_t>(d);
    }
    if (count != data.size())
        throw Error("internal: an array of " + std::to_string(data.size()) + " floats written as " + std::to_string(count));
    if (shape.size() > 1) dims.resize(dims.size() - 1);  // "(2, 3)" but "(5,)"
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
    // Magic (6) + version (2) + header length (2) + header, padded with spaces and a newline to 64 bytes.
    const size_t unpadded = 10 + header.size() + 1;
    header.append((64 - unpadded % 64) % 64, ' ');
    header += '\n';
    const uint16_t header_len = static_cast<uint16_t>(header.size());
    std::string bytes("\x93NUMPY\x01\x00", 8);  // magic, version 1.0
    bytes.append(reinterpret_cast<const char*>(&header_len), 2);
    bytes += header;
    bytes.append(reinterpret_cast<const char*>(data.data()), count * sizeof(float));
    write_file(path, bytes, "the array");
}

NpyArray read_npy(const std::string& path) {
    const RegularFile file(path, ".npy file");
    const std::string bytes = file.read_all(kMaxNpyBytes);
    auto fail = [&](const std::string& what) -> void { throw Error("'" + path + "' " + what); };
    uint16_t header_len = 0;
    if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0 || bytes[6] != 1) fail("is not a version 1 .npy file");
    std::memcpy(&header_len, bytes.data() + 8, 2);
    if (bytes.size() < 10 + size_t{header_len}) fail("has a truncated header");
    const std::string header = bytes.substr(10, header_len);

    NpyArray a;
    const std::string_view h = header;
    // 'descr': '<f4' (a byte order of < or |, a kind letter, a size digit)
    const bool has_dtype = each_value_of(h, "'descr':", [&](size_t v) {
        if (v + 5 > h.size() || h[v] != '\'' || h[v + 4] != '\'') return false;
        const char order = h[v + 1], kind = h[v + 2], size = h[v + 3];
        if ((order != '<' && order != '|') || kind < 'a' || kind > 'z' || size < '0' || size > '9') return false;
        a.dtype = std::string(h.substr(v + 1, 3));
        return true;
    });
    if (!has_dtype) fail("has no dtype in its header");
    if (a.dtype != "<f4" && a.dtype != "<i8") fail("has the unsupported dtype " + a.dtype);
    if (each_value_of(h, "'fortran_order':", [&](size_t v) { return h.substr(v, 4) == "True"; }))
        fail("is in Fortran order, not supported");
    // 'shape': (2, 3) : digits, commas and spaces between the parentheses
    std::string_view dims;
    const bool has_shape = each_value_of(h, "'shape':", [&](size_t v) {
        if (v >= h.size() || h[v] != '(') return false;
        size_t end = v + 1;
        while (end < h.size() && ((h[end] >= '0' && h[end] <= '9') || h[end] == ',' || h[end] == ' ')) ++end;
        if (end >= h.size() || h[end] != ')') return false;
        dims = h.substr(v + 1, end - v - 1);
        return true;
    });
    if (!has_shape) fail("has no shape in its header");
    // Every dimension and their product checked against the bytes the file holds before anything is sized.
    const size_t elem = a.dtype == "<f4" ? 4 : 8;
    const size_t payload = bytes.size() - 10 - header_len;
    size_t count = 1;
    for (size_t i = 0; i < dims.size();) {
        if (dims[i] < '0' || dims[i] > '9') {
            ++i;
            continue;
        }
        size_t end = i;
        while (end < dims.size() && dims[end] >= '0' && dims[end] <= '9') ++end;
        const std::string digits(dims.substr(i, end - i));
        i = end;
        if (digits.size() > 18) fail("has a dimension of " + digits + ", more than the file holds");
        const auto d = static_cast<size_t>(std::stoll(digits));
        if (d != 0 && count > payload / elem / d) fail("has a shape larger than the " + std::to_string(payload) + " bytes it holds");
        count *= d;
        a.shape.push_back(static_cast<int64_t>(d));
    }
    if (count * elem > payload) fail("is truncated");
    const char* data = bytes.data() + 10 + header_len;
    // An empty array's vector has no storage to copy into (memcpy of nothing from or to null is still UB).
    if (a.dtype == "<f4") {
        a.f32.resize(count);
        if (count > 0) std::memcpy(a.f32.data(), data, count * elem);
    } else {
        a.i64.resize(count);
        if (count > 0) std::memcpy(a.i64.data(), data, count * elem);
    }
    return a;
}

}  // namespace kvx
