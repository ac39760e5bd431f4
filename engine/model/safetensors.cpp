#include "engine/model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <string_view>

#include "engine/files/json_file.h"
#include "kernels/error.h"

namespace kvx {
namespace {

size_t dtype_size(const std::string& dtype) {
    if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
    if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
    if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
    if (dtype == "I8" || dtype == "U8" || dtype == "BOOL") return 1;
    return 0;
}

std::string shape_string(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : file_(std::make_unique<MappedFile>(path)) {
    const size_t file_size = file_->size();
    auto fail = [&](const std::string& what) { throw Error("weights file '" + path + "' is corrupt: " + what); };
    if (file_size < 8) fail("shorter than its 8-byte header length");
    uint64_t header_len = 0;
    std::memcpy(&header_len, file_->data(), 8);  // little-endian on every target kvx builds for
    // Not the length itself in the message: for a file that is not safetensors it is the file's first bytes.
    if (header_len > file_size - 8) fail("its header length exceeds the file of " + std::to_string(file_size) + " bytes");
    const char* header_begin = reinterpret_cast<const char*>(file_->data() + 8);
    const nlohmann::json header =
        parse_json(std::string_view(header_begin, header_len), "weights file '" + path + "' is corrupt: its header");
    if (!header.is_object()) fail("header is not a JSON object");

    const uint8_t* data_begin = file_->data() + 8 + header_len;
    const size_t data_size = file_size - 8 - header_len;
    std::vector<std::pair<size_t, size_t>> ranges;
    for (const auto& [name, entry] : header.items()) {
        if (name == "__metadata__") continue;
        if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
            !entry.contains("data_offsets") || !entry["dtype"].is_string() || !entry["shape"].is_array() ||
            !entry["data_offsets"].is_array() || entry["data_offsets"].size() != 2)
            fail("tensor '" + name + "' has a malformed header entry");
        TensorView view;
        view.dtype = entry["dtype"].get<std::string>();
        const size_t elem = dtype_size(view.dtype);
        if (elem == 0) fail("tensor '" + name + "' has unknown dtype '" + view.dtype + "'");
        size_t count = 1;
        for (const auto& d : entry["shape"]) {
            if (!d.is_number_unsigned()) fail("tensor '" + name + "' has a malformed shape");
            const auto dim = d.get<uint64_t>();
            if (dim != 0 && count > SIZE_MAX / elem / dim) fail("tensor '" + name + "' is impossibly large");
            count *= dim;
            view.shape.push_back(static_cast<int64_t>(dim));
        }
        const auto& offs = entry["data_offsets"];
        if (!offs[0].is_number_unsigned() || !offs[1].is_number_unsigned())
            fail("tensor '" + name + "' has malformed data offsets");
        const auto begin = offs[0].get<uint64_t>(), end = offs[1].get<uint64_t>();
        if (begin > end || end > data_size)
            fail("tensor '" + name + "' lies outside the file (offsets " + std::to_string(begin) + ".." +
                 std::to_string(end) + ", data section of " + std::to_string(data_size) +
                 " bytes): the file is truncated or damaged");
        view.nbytes = static_cast<size_t>(end - begin);
        if (view.nbytes != count * elem)
            fail("tensor '" + name + "' holds " + std::to_string(view.nbytes) + " bytes but " + view.dtype + " " +
                 shape_string(view.shape) + " needs " + std::to_string(count * elem));
        view.data = data_begin + begin;
        if (reinterpret_cast<uintptr_t>(view.data) % elem != 0)
            fail("tensor '" + name + "' is not aligned to its element size");
        ranges.emplace_back(static_cast<size_t>(begin), static_cast<size_t>(end));
        tensors_.emplace(name, std::move(view));
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i)
        if (ranges[i].first < ranges[i - 1].second) fail("two tensors overlap");
}

const TensorView& SafetensorsFile::tensor(const std::string& name, const char* dtype,
                                           const std::vector<int64_t>& expected_shape) const {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) throw Error("weights file '" + path() + "' has no tensor '" + name + "'");
    const TensorView& t = it->second;
    if (t.dtype != dtype) throw Error("tensor '" + name + "' is " + t.dtype + ", expected " + dtype);
    if (t.shape != expected_shape)
        throw Error("tensor '" + name + "' has shape " + shape_string(t.shape) + " but the model config needs " +
                    shape_string(expected_shape));
    return t;
}

const float* SafetensorsFile::f32(const std::string& name, const std::vector<int64_t>& expected_shape) const {
    return reinterpret_cast<const float*>(tensor(name, "F32", expected_shape).data);
}

const uint16_t* SafetensorsFile::f16(const std::string& name, const std::vector<int64_t>& expected_shape) const {
    return reinterpret_cast<const uint16_t*>(tensor(name, "F16", expected_shape).data);
}

}  // namespace kvx
