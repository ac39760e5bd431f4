#include "engine/files/regular_file.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/error.h"

namespace kvx {

RegularFile::RegularFile(const std::string& path, const std::string& what) : path_(path), what_(what) {
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer; it changes nothing for a
    // regular file.
    fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd_ < 0) throw Error("cannot open " + what + " '" + path + "': " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
        const bool directory = S_ISDIR(st.st_mode);
        ::close(fd_);
        throw Error(what + " '" + path + "' is " + (directory ? "a directory" : "not a regular file"));
    }
    size_ = static_cast<size_t>(st.st_size);
}

RegularFile::~RegularFile() { ::close(fd_); }

std::string RegularFile::read_all(size_t max_bytes) const {
    if (size_ > max_bytes)
        throw Error(what_ + " '" + path_ + "' is " + std::to_string(size_) + " bytes, more than the " +
                    std::to_string(max_bytes) + " a " + what_ + " may have");
    std::string bytes(size_, '\0');
    size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t n = ::pread(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw Error("cannot read " + what_ + " '" + path_ + "': " + std::strerror(errno));
        if (n == 0) break;  // shrank since it was opened
        done += static_cast<size_t>(n);
    }
    bytes.resize(done);
    return bytes;
}

namespace {

// Writes all of `bytes` to fd; false with errno set on the first failure.
bool write_all(int fd, std::string_view bytes) {
    for (size_t done = 0; done < bytes.size();) {
        const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        done += static_cast<size_t>(n);
    }
    return true;
}

}  // namespace

void write_file(const std::string& path, std::string_view bytes, const std::string& what) {
    auto fail = [&](int err) { throw Error("cannot write " + what + " to '" + path + "': " + std::strerror(err)); };
    struct stat st {};
    const bool exists = ::stat(path.c_str(), &st) == 0;
    if (exists && !S_ISREG(st.st_mode)) {  // a pipe or a device: written in place, never replaced or removed
        const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
        if (fd < 0) fail(errno);
        const bool ok = write_all(fd, bytes);
        const int err = errno;
        ::close(fd);
        if (!ok) fail(err);
        return;
    }
    std::string temporary = path + ".XXXXXX";
    const int fd = ::mkstemp(temporary.data());
    if (fd < 0) fail(errno);
    bool ok = write_all(fd, bytes) && ::fsync(fd) == 0;
    int err = ok ? 0 : errno;
    if (::close(fd) != 0 && ok) {
        ok = false;
        err = errno;
    }
    if (ok) {
        // mkstemp makes the file 0600; give it what a plain create would have had under this umask.
        const mode_t umask_now = ::umask(0);
        ::umask(umask_now);
        if (::chmod(temporary.c_str(), 0666 & ~umask_now) == 0 && ::rename(temporary.c_str(), path.c_str()) == 0) return;
        err = errno;
    }
    ::unlink(temporary.c_str());
    fail(err);
}

std::string file_inside(const std::string& dir, const std::string& name, const std::string& field) {
    namespace fs = std::filesystem;
    auto refuse = [&](const std::string& why) {
        throw Error("model folder '" + dir + "': '" + field + "' = '" + name + "' " + why);
    };
    if (name.empty()) refuse("is empty");
    if (name.find('\0') != std::string::npos) refuse("holds a NUL byte");
    const fs::path relative(name);
    if (relative.is_absolute()) refuse("is an absolute path: a model's files must stay inside its folder");
    for (const fs::path& step : relative)
        if (step == "..") refuse("leaves the model folder ('..')");
    const fs::path full = fs::path(dir) / relative;
    std::error_code error;
    const fs::path real = fs::canonical(full, error);
    if (!error) {  // a missing file is the opener's to report
        const fs::path real_dir = fs::canonical(dir, error);
        if (!error) {
            const auto [end, at] = std::mismatch(real_dir.begin(), real_dir.end(), real.begin(), real.end());
            if (end != real_dir.end()) refuse("leads outside the model folder (to '" + real.string() + "')");
        }
    }
    return full.string();
}

}  // namespace kvx
