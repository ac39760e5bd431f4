// Helpers for the llama2.c tokenizer's tests: tok512.bin read by a plain trusting reader (independent of the
// tokenizer's own), vocabularies written back as files, with whatever a test wants to break in them.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <unistd.h>
#include <vector>

namespace kvx::test {

inline const std::string tok512_path = std::string(KVX_SOURCE_DIR) + "/testdata/models/stories260K/tok512.bin";

inline std::string file_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A llama2.c tokenizer file's contents, as they are (no check: tests write broken ones on purpose).
struct Llama2cFile {
    int32_t max_token_length = 0;
    std::vector<float> scores;        // [pieces]
    std::vector<std::string> pieces;  // [pieces]

    static Llama2cFile read(const std::string& path) {
        const std::string bytes = file_bytes(path);
        Llama2cFile f;
        std::memcpy(&f.max_token_length, bytes.data(), 4);
        for (size_t at = 4; at + 8 <= bytes.size();) {
            float score = 0;
            int32_t length = 0;
            std::memcpy(&score, bytes.data() + at, 4);
            std::memcpy(&length, bytes.data() + at + 4, 4);
            f.scores.push_back(score);
            f.pieces.push_back(bytes.substr(at + 8, static_cast<size_t>(length)));
            at += 8 + static_cast<size_t>(length);
        }
        return f;
    }

    std::string bytes() const {
        std::string out(reinterpret_cast<const char*>(&max_token_length), 4);
        for (size_t i = 0; i < pieces.size(); ++i) {
            const auto length = static_cast<int32_t>(pieces[i].size());
            out.append(reinterpret_cast<const char*>(&scores[i]), 4);
            out.append(reinterpret_cast<const char*>(&length), 4);
            out += pieces[i];
        }
        return out;
    }
};

// A file in the temporary directory that lives as long as the object; the process id in its name keeps
// two test runs at once (two build directories, ctest -j) apart.
class TempFile {
public:
    TempFile(const std::string& name, const std::string& bytes)
        : path_((std::filesystem::temp_directory_path() / ("kvx_test_" + std::to_string(::getpid()) + "_" + name)).string()) {
        std::ofstream(path_, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    }
    ~TempFile() { std::filesystem::remove(path_); }
    TempFile(const TempFile&) = delete;
    TempFile& operator=(const TempFile&) = delete;
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

}  // namespace kvx::test
