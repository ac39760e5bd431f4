// The rules every loader follows for a file it is handed (a model folder's files, a prompt file): only a
// regular file is read (a FIFO would block and a device such as /dev/zero never end), it is opened without
// blocking, and its size is checked before anything is allocated for it. A file a model folder names is
// confined to that folder.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kvx {

class RegularFile {
public:
    // Opens `path` for reading. Throws kvx::Error "cannot open WHAT 'PATH': reason" or "WHAT 'PATH' is not
    // a regular file".
    RegularFile(const std::string& path, const std::string& what);
    ~RegularFile();
    RegularFile(const RegularFile&) = delete;
    RegularFile& operator=(const RegularFile&) = delete;

    int fd() const { return fd_; }
    size_t size() const { return size_; }  // when opened
    const std::string& path() const { return path_; }

    // The whole file. Throws kvx::Error when it is larger than max_bytes (naming both) or a read fails.
    std::string read_all(size_t max_bytes) const;

private:
    std::string path_;
    std::string what_;
    int fd_ = -1;
    size_t size_ = 0;
};

// Writes `bytes` to `path` whole or not at all. A path that is absent or a regular file gets a temporary
// sibling renamed over it once everything is written, so a full disk or a crash never leaves a truncated file
// that passes for a result; any other path (a pipe, /dev/stdout, a device) is written as it is and never
// removed. Throws kvx::Error "cannot write WHAT to 'PATH': reason".
void write_file(const std::string& path, std::string_view bytes, const std::string& what);

// dir/name for a file name a model folder's config gives (`field`, for messages), refused unless it stays
// inside the folder: not empty, not absolute, no ".." step, no NUL, and, where it exists, its real path (links
// followed) inside the folder's real path. Throws kvx::Error naming the field and the name.
std::string file_inside(const std::string& dir, const std::string& name, const std::string& field);

}  // namespace kvx
