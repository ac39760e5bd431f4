#include "fuzz_support.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace kvx::fuzz {
namespace {

std::string make_scratch_dir() {
    namespace fs = std::filesystem;
    const fs::path base = fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
    const fs::path dir = base / ("kvx_fuzz_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    return dir.string();
}

}  // namespace

const std::string& scratch_dir() {
    static const std::string dir = make_scratch_dir();
    static const bool cleanup = [] {
        std::atexit([] { std::filesystem::remove_all(scratch_dir()); });
        return true;
    }();
    (void)cleanup;
    return dir;
}

std::string scratch_file(const std::string& name, std::string_view bytes) {
    const std::string path = scratch_dir() + "/" + name;
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return path;
}

}  // namespace kvx::fuzz
