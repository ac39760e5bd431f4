#include "output.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "kernels/error.h"

namespace kvx::cli {

void write_out(std::string_view text) {
    errno = 0;
    const size_t written = std::fwrite(text.data(), 1, text.size(), stdout);
    if (written != text.size() || std::fflush(stdout) != 0 || std::ferror(stdout)) {
        const int err = errno;
        std::clearerr(stdout);
        throw Error(std::string("cannot write to standard output: ") + (err ? std::strerror(err) : "write failed"));
    }
}

}  // namespace kvx::cli
