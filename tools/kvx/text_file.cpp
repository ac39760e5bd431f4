#include "text_file.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/error.h"

namespace kvx::cli {

std::string read_text_file(const std::string& path, const std::string& what, size_t max_bytes) {
    // Blocking, unlike the model files: a prompt may come from a pipe (-f <(command)) the user means kvx to wait on.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw Error("cannot read " + what + " '" + path + "': " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
        ::close(fd);
        throw Error(what + " '" + path + "' is a directory");
    }
    std::string text;
    char buffer[1 << 16];
    for (;;) {
        const ssize_t n = ::read(fd, buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            const int err = errno;
            ::close(fd);
            throw Error("cannot read " + what + " '" + path + "': " + std::strerror(err));
        }
        if (n == 0) break;
        if (text.size() + static_cast<size_t>(n) > max_bytes) {
            ::close(fd);
            throw Error(what + " '" + path + "' is longer than " + std::to_string(max_bytes) + " bytes");
        }
        text.append(buffer, static_cast<size_t>(n));
    }
    ::close(fd);
    return text;
}

std::optional<std::string> read_line(std::istream& in, size_t max_bytes, bool& too_long) {
    too_long = false;
    std::string line;
    size_t skipped = 0;
    for (int c; (c = in.get()) != std::istream::traits_type::eof();) {
        if (c == '\n') {
            if (too_long) line.clear();
            return line;
        }
        if (too_long) {
            if (++skipped > 16 * max_bytes)
                throw Error("standard input holds a line of more than " + std::to_string(16 * max_bytes) +
                            " bytes: it is not text to chat with");
            continue;
        }
        line.push_back(static_cast<char>(c));
        if (line.size() > max_bytes) {
            too_long = true;
            skipped = line.size();
            line.clear();
        }
    }
    if (line.empty() && !too_long) return std::nullopt;  // the end, after a last newline
    if (too_long) line.clear();
    return line;
}

}  // namespace kvx::cli
