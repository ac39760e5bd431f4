// A folder of its own for one test, under the system's temp directory: emptied when made, removed with
// everything in it when the test ends.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace kvx::test {

struct TempFolder {
    std::filesystem::path path;

    // tag names the test in the folder's name, which also carries the process id (ctest runs tests side by side).
    explicit TempFolder(const std::string& tag)
        : path(std::filesystem::temp_directory_path() / (tag + "_" + std::to_string(::getpid()))) {
        std::filesystem::remove_all(path);
        std::filesystem::create_directories(path);
    }
    ~TempFolder() { std::filesystem::remove_all(path); }
    TempFolder(const TempFolder&) = delete;
    TempFolder& operator=(const TempFolder&) = delete;

    void write(const std::string& name, const std::string& bytes) const {
        std::ofstream(path / name, std::ios::binary) << bytes;
    }
    std::string str() const { return path.string(); }
};

}  // namespace kvx::test
