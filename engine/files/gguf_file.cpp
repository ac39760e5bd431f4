#include "engine/files/gguf_file.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/error.h"

namespace kvx {
namespace {

// Far above any real file, low enough that nothing is allocated for a count a crafted file merely claims.
constexpr uint64_t kMaxKeys = 1 << 16;               // real files have a few dozen
constexpr uint64_t kMaxTensors = 1 << 20;            // a few hundred per model, a few thousand for the largest
constexpr uint64_t kMaxArrayValues = uint64_t{1} << 24;  // all arrays together; a 256k vocabulary holds ~1M
constexpr int kMaxArrayDepth = 4;
constexpr uint64_t kMaxNameBytes = 1 << 16;          // a key or a tensor name
constexpr uint32_t kMaxDims = 4;                     // GGML_MAX_DIMS
constexpr int64_t kMaxElements = int64_t{1} << 44;   // one tensor; keeps every byte count below 2^63

size_t scalar_bytes(GgufValueType t) {
    switch (t) {
        case GgufValueType::u8: case GgufValueType::i8: case GgufValueType::boolean: return 1;
        case GgufValueType::u16: case GgufValueType::i16: return 2;
        case GgufValueType::u32: case GgufValueType::i32: case GgufValueType::f32: return 4;
        case GgufValueType::u64: case GgufValueType::i64: case GgufValueType::f64: return 8;
        case GgufValueType::string: case GgufValueType::array: break;
    }
    return 0;
}

bool is_integer(GgufValueType t) {
    return scalar_bytes(t) > 0 && t != GgufValueType::f32 && t != GgufValueType::f64 && t != GgufValueType::boolean;
}

// Scalar item i of a packed array, or the scalar at p, widened into v (little-endian, unaligned).
void read_scalar(GgufValueType t, const uint8_t* p, GgufValue& v) {
    uint64_t bits = 0;
    std::memcpy(&bits, p, scalar_bytes(t));
    v.type = t;
    switch (t) {
        case GgufValueType::u8: case GgufValueType::u16: case GgufValueType::u32: v.integer = static_cast<int64_t>(bits); break;
        case GgufValueType::boolean: v.integer = bits != 0; break;
        case GgufValueType::i8: v.integer = static_cast<int8_t>(bits); break;
        case GgufValueType::i16: v.integer = static_cast<int16_t>(bits); break;
        case GgufValueType::i32: v.integer = static_cast<int32_t>(bits); break;
        case GgufValueType::i64: v.integer = static_cast<int64_t>(bits); break;
        case GgufValueType::u64:
            v.integer = static_cast<int64_t>(bits);
            v.unsigned_big = bits > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
            break;
        case GgufValueType::f32: {
            float f;
            std::memcpy(&f, p, 4);
            v.real = f;
            break;
        }
        case GgufValueType::f64: std::memcpy(&v.real, p, 8); break;
        case GgufValueType::string: case GgufValueType::array: break;
    }
}

// Reads the header in order, never past the end of the file: each read names what it was reading.
class Cursor {
public:
    Cursor(const GgufFile& file, const uint8_t* data, size_t size) : file_(file), data_(data), size_(size) {}

    size_t pos() const { return pos_; }
    size_t left() const { return size_ - pos_; }
    const uint8_t* take(uint64_t n, const std::string& what) {
        if (n > left())
            file_.fail("truncated: " + what + " needs " + std::to_string(n) + " bytes at offset " + std::to_string(pos_) +
                       ", the file has " + std::to_string(left()) + " left");
        const uint8_t* p = data_ + pos_;
        pos_ += static_cast<size_t>(n);
        return p;
    }
    uint32_t u32(const std::string& what) {
        uint32_t v;
        std::memcpy(&v, take(4, what), 4);
        return v;
    }
    uint64_t u64(const std::string& what) {
        uint64_t v;
        std::memcpy(&v, take(8, what), 8);
        return v;
    }
    std::string_view string(const std::string& what, uint64_t max_bytes) {
        const uint64_t n = u64(what);
        if (n > max_bytes) file_.fail(what + " claims " + std::to_string(n) + " bytes (more than " + std::to_string(max_bytes) + ")");
        return {reinterpret_cast<const char*>(take(n, what)), static_cast<size_t>(n)};
    }

private:
    const GgufFile& file_;
    const uint8_t* data_;
    size_t size_;
    size_t pos_ = 0;
};

GgufValueType value_type(const GgufFile& file, uint32_t raw, const std::string& key) {
    if (raw > static_cast<uint32_t>(GgufValueType::f64))
        file.fail("metadata '" + key + "' has unknown value type " + std::to_string(raw));
    return static_cast<GgufValueType>(raw);
}

GgufValue read_value(const GgufFile& file, Cursor& c, GgufValueType type, const std::string& key, uint64_t& budget,
                     int depth) {
    GgufValue v;
    v.type = type;
    if (const size_t bytes = scalar_bytes(type)) {
        read_scalar(type, c.take(bytes, "the value of '" + key + "'"), v);
        return v;
    }
    if (type == GgufValueType::string) {
        v.text = c.string("the value of '" + key + "'", std::numeric_limits<uint64_t>::max());
        return v;
    }
    if (depth >= kMaxArrayDepth) file.fail("metadata '" + key + "' nests arrays more than " + std::to_string(kMaxArrayDepth) + " deep");
    v.item_type = value_type(file, c.u32("the item type of '" + key + "'"), key);
    v.count = c.u64("the length of '" + key + "'");
    if (v.count > budget)
        file.fail("metadata arrays hold more than " + std::to_string(kMaxArrayValues) + " values ('" + key + "' has " +
                  std::to_string(v.count) + ")");
    budget -= v.count;
    if (const size_t bytes = scalar_bytes(v.item_type)) {
        v.items = c.take(v.count * bytes, "the " + std::to_string(v.count) + " values of '" + key + "'");
        return v;
    }
    if (v.count * 8 > c.left())  // every string or array item takes at least 8 bytes
        file.fail("metadata '" + key + "' claims " + std::to_string(v.count) + " items, more than the file can hold");
    for (uint64_t i = 0; i < v.count; ++i) {
        if (v.item_type == GgufValueType::string)
            v.strings.push_back(c.string("item " + std::to_string(i) + " of '" + key + "'", std::numeric_limits<uint64_t>::max()));
        else
            v.arrays.push_back(read_value(file, c, GgufValueType::array, key, budget, depth + 1));
    }
    return v;
}

}  // namespace

std::string_view gguf_value_type_name(GgufValueType type) {
    static constexpr std::string_view names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                                 "bool", "string", "array", "u64", "i64", "f64"};
    const auto i = static_cast<size_t>(type);
    return i < std::size(names) ? names[i] : "unknown";
}

int64_t GgufTensor::elements() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
}

void GgufFile::fail(const std::string& what) const { throw Error("GGUF file '" + path() + "': " + what); }

GgufFile::GgufFile(const std::string& path) : file_(std::make_unique<MappedFile>(path)) {
    Cursor c(*this, file_->data(), file_->size());
    if (file_->size() < 24 || std::memcmp(file_->data(), "GGUF", 4) != 0) fail("not a GGUF file (no GGUF magic)");
    c.take(4, "the magic");
    version_ = c.u32("the version");
    if ((version_ & 0xffff) == 0 && version_ != 0)
        fail("written in big-endian byte order (version " + std::to_string(__builtin_bswap32(version_)) +
             "), which kvx does not read");
    if (version_ != 2 && version_ != 3)
        fail("GGUF version " + std::to_string(version_) + " is not one kvx reads (2 and 3)");
    const uint64_t n_tensors = c.u64("the tensor count"), n_keys = c.u64("the key count");
    constexpr uint64_t kMinKeyBytes = 8 + 4 + 1, kMinTensorBytes = 8 + 4 + 4 + 8;
    if (n_keys > kMaxKeys || n_keys * kMinKeyBytes > c.left())
        fail("claims " + std::to_string(n_keys) + " metadata keys, more than " +
             (n_keys > kMaxKeys ? "kvx reads (" + std::to_string(kMaxKeys) + ")" : "the file can hold"));
    if (n_tensors > kMaxTensors || n_tensors * kMinTensorBytes > c.left())
        fail("claims " + std::to_string(n_tensors) + " tensors, more than " +
             (n_tensors > kMaxTensors ? "kvx reads (" + std::to_string(kMaxTensors) + ")" : "the file can hold"));

    uint64_t budget = kMaxArrayValues;
    for (uint64_t k = 0; k < n_keys; ++k) {
        const std::string key(c.string("metadata key " + std::to_string(k), kMaxNameBytes));
        const GgufValueType type = value_type(*this, c.u32("the value type of '" + key + "'"), key);
        GgufValue value = read_value(*this, c, type, key, budget, 0);
        if (!metadata_.emplace(key, std::move(value)).second) fail("metadata key '" + key + "' appears twice");
    }
    if (const GgufValue* a = find("general.alignment")) {
        if (a->type != GgufValueType::u32) fail("general.alignment is a " + std::string(gguf_value_type_name(a->type)) + ", not a u32");
        if (a->integer == 0 || (a->integer & (a->integer - 1)) != 0)
            fail("general.alignment " + std::to_string(a->integer) + " is not a power of two");
        alignment_ = static_cast<size_t>(a->integer);
    }

    struct Info {
        uint64_t offset;
        size_t index;
    };
    std::vector<Info> extents;
    tensors_.reserve(static_cast<size_t>(n_tensors));
    for (uint64_t t = 0; t < n_tensors; ++t) {
        GgufTensor tensor;
        tensor.name = c.string("tensor name " + std::to_string(t), kMaxNameBytes);
        const std::string what = "tensor '" + tensor.name + "'";
        const uint32_t n_dims = c.u32("the rank of " + what);
        if (n_dims == 0 || n_dims > kMaxDims)
            fail(what + " has " + std::to_string(n_dims) + " dims (GGUF allows 1 to " + std::to_string(kMaxDims) + ")");
        int64_t elements = 1;
        for (uint32_t d = 0; d < n_dims; ++d) {
            const uint64_t dim = c.u64("the dims of " + what);
            // Divided, not multiplied: elements * dim could wrap past 2^64 and pass.
            if (dim == 0 || dim > static_cast<uint64_t>(kMaxElements / elements))
                fail(what + " has a dim of " + std::to_string(dim) + ": empty, or more than 2^44 values in all");
            elements *= static_cast<int64_t>(dim);
            tensor.dims.push_back(static_cast<int64_t>(dim));
        }
        const uint32_t raw_type = c.u32("the type of " + what);
        const GgmlTypeInfo* info = find_ggml_type(raw_type);
        if (!info) fail(what + " has unknown ggml type " + std::to_string(raw_type));
        tensor.type = info->type;
        if (tensor.dims[0] % info->block_values != 0)
            fail(what + " has rows of " + std::to_string(tensor.dims[0]) + " values, not a multiple of the " +
                 std::string(info->name) + " block of " + std::to_string(info->block_values));
        tensor.nbytes = static_cast<size_t>(elements / info->block_values * info->block_bytes);
        const uint64_t offset = c.u64("the data offset of " + what);
        if (offset % alignment_ != 0)
            fail(what + " starts at data offset " + std::to_string(offset) + ", not a multiple of the alignment " +
                 std::to_string(alignment_));
        if (!tensor_index_.emplace(tensor.name, tensors_.size()).second) fail(what + " appears twice");
        extents.push_back({offset, tensors_.size()});
        tensors_.push_back(std::move(tensor));
    }

    const size_t data_start = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
    const size_t data_bytes = data_start <= file_->size() ? file_->size() - data_start : 0;
    std::sort(extents.begin(), extents.end(), [](const Info& a, const Info& b) { return a.offset < b.offset; });
    uint64_t end_of_previous = 0;
    const GgufTensor* previous = nullptr;
    for (const Info& e : extents) {
        GgufTensor& t = tensors_[e.index];
        if (e.offset > data_bytes || t.nbytes > data_bytes - e.offset)
            fail("truncated: tensor '" + t.name + "' (" + std::string(ggml_type_info(t.type).name) + ", " +
                 std::to_string(t.nbytes) + " bytes at data offset " + std::to_string(e.offset) + ") reaches past the end of the file");
        if (previous && e.offset < end_of_previous)
            fail("tensors '" + previous->name + "' and '" + t.name + "' overlap");
        t.data = file_->data() + data_start + e.offset;
        end_of_previous = e.offset + t.nbytes;
        previous = &t;
    }
}

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
    const auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufValue* GgufFile::find(std::string_view key) const {
    const auto it = metadata_.find(key);
    return it == metadata_.end() ? nullptr : &it->second;
}

namespace {
std::string mistyped(std::string_view key, const GgufValue& v, const char* wanted) {
    return "metadata '" + std::string(key) + "' is a " + std::string(gguf_value_type_name(v.type)) + ", not " + wanted;
}
}  // namespace

std::optional<int64_t> GgufFile::integer(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (!is_integer(v->type) || v->unsigned_big) fail(mistyped(key, *v, "an integer kvx can hold"));
    return v->integer;
}

std::optional<double> GgufFile::real(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (v->type != GgufValueType::f32 && v->type != GgufValueType::f64) fail(mistyped(key, *v, "a float"));
    if (!std::isfinite(v->real)) fail("metadata '" + std::string(key) + "' is not a finite number");
    return v->real;
}

std::optional<bool> GgufFile::boolean(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (v->type != GgufValueType::boolean) fail(mistyped(key, *v, "a bool"));
    return v->integer != 0;
}

std::optional<std::string_view> GgufFile::string(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return std::nullopt;
    if (v->type != GgufValueType::string) fail(mistyped(key, *v, "a string"));
    return v->text;
}

std::vector<std::string_view> GgufFile::strings(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return {};
    if (v->type != GgufValueType::array || v->item_type != GgufValueType::string) fail(mistyped(key, *v, "an array of strings"));
    return v->strings;
}

std::vector<float> GgufFile::floats(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return {};
    if (v->type != GgufValueType::array || v->item_type != GgufValueType::f32) fail(mistyped(key, *v, "an array of f32"));
    std::vector<float> out(static_cast<size_t>(v->count));
    if (!out.empty()) std::memcpy(out.data(), v->items, out.size() * 4);
    return out;
}

std::vector<int64_t> GgufFile::integers(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return {};
    if (v->type != GgufValueType::array || !is_integer(v->item_type)) fail(mistyped(key, *v, "an array of integers"));
    const size_t bytes = scalar_bytes(v->item_type);
    std::vector<int64_t> out(static_cast<size_t>(v->count));
    for (size_t i = 0; i < out.size(); ++i) {
        GgufValue item;
        read_scalar(v->item_type, v->items + i * bytes, item);
        if (item.unsigned_big) fail("metadata '" + std::string(key) + "' item " + std::to_string(i) + " does not fit an int64");
        out[i] = item.integer;
    }
    return out;
}

}  // namespace kvx
