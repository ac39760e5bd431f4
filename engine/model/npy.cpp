#include "engine/model/npy.h"

#include <cstring>
#include <fstream>
#include <regex>

#include "kernels/error.h"

namespace kvx {

void write_npy_f32(const std::string& path, const float* data, const std::vector<int64_t>& shape) {
    std::string dims;
    int64_t count = 1;
    for (int64_t d : shape) {
        dims += std::to_string(d) + ", ";
        count *= d;
    }
    if (shape.size() > 1) dims.resize(dims.size() - 1);  // "(2, 3)" but "(5,)"
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
    // Magic (6) + version (2) + header length (2) + header, padded with spaces and a newline to 64 bytes.
    const size_t unpadded = 10 + header.size() + 1;
    header.append((64 - unpadded % 64) % 64, ' ');
    header += '\n';
    std::ofstream out(path, std::ios::binary);
    if (!out) throw Error("cannot write '" + path + "'");
    const uint16_t header_len = static_cast<uint16_t>(header.size());
    out.write("\x93NUMPY\x01\x00", 8);
    out.write(reinterpret_cast<const char*>(&header_len), 2);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(count * 4));
    if (!out) throw Error("failed writing '" + path + "'");
}

NpyArray read_npy(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error("cannot open '" + path + "'");
    char magic[8];
    uint16_t header_len = 0;
    if (!in.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0 || magic[6] != 1 ||
        !in.read(reinterpret_cast<char*>(&header_len), 2))
        throw Error("'" + path + "' is not a version 1 .npy file");
    std::string header(header_len, '\0');
    if (!in.read(header.data(), header_len)) throw Error("'" + path + "' has a truncated header");

    NpyArray a;
    std::smatch m;
    if (!std::regex_search(header, m, std::regex("'descr':\\s*'([<|][a-z][0-9])'")))
        throw Error("'" + path + "': no dtype in the header");
    a.dtype = m[1];
    if (a.dtype != "<f4" && a.dtype != "<i8") throw Error("'" + path + "': unsupported dtype " + a.dtype);
    if (std::regex_search(header, std::regex("'fortran_order':\\s*True")))
        throw Error("'" + path + "': Fortran order is not supported");
    if (!std::regex_search(header, m, std::regex("'shape':\\s*\\(([0-9, ]*)\\)")))
        throw Error("'" + path + "': no shape in the header");
    int64_t count = 1;
    const std::string dims = m[1];
    const std::regex number("[0-9]+");
    for (std::sregex_iterator it(dims.begin(), dims.end(), number), end; it != end; ++it) {
        a.shape.push_back(std::stoll(it->str()));
        count *= a.shape.back();
    }
    const std::streamsize bytes = static_cast<std::streamsize>(count * (a.dtype == "<f4" ? 4 : 8));
    char* dst = nullptr;
    if (a.dtype == "<f4") {
        a.f32.resize(static_cast<size_t>(count));
        dst = reinterpret_cast<char*>(a.f32.data());
    } else {
        a.i64.resize(static_cast<size_t>(count));
        dst = reinterpret_cast<char*>(a.i64.data());
    }
    if (!in.read(dst, bytes)) throw Error("'" + path + "' is truncated");
    return a;
}

}  // namespace kvx
