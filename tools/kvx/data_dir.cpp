#include "data_dir.h"

#include <system_error>

#include "kernels/error.h"

namespace kvx::cli {

std::filesystem::path bin_dir() {
    std::error_code error;
    const std::filesystem::path self = std::filesystem::canonical("/proc/self/exe", error);
    if (error) throw Error("cannot find the running kvx binary (/proc/self/exe: " + error.message() + ")");
    return self.parent_path();
}

std::filesystem::path data_dir() {
    return (bin_dir() / KVX_DATA_FROM_BIN).lexically_normal();
}

}  // namespace kvx::cli
