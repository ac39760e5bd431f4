// Text kvx reads from the user: a file named on the command line (a prompt, a text to tokenize) and chat's
// lines from standard input. Both are bounded: a prompt cannot be longer than its context could hold
// (max_prompt_bytes), so /dev/zero or a runaway pipe ends in one line instead of filling memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <istream>
#include <optional>
#include <string>

namespace kvx::cli {

// The most bytes one token covers, with room to spare: the longest pieces of real vocabularies are runs of a
// few dozen spaces or symbols.
inline constexpr size_t kMaxBytesPerToken = 1024;

// The longest text a context of `context` tokens could hold.
inline size_t max_prompt_bytes(int64_t context) { return static_cast<size_t>(context) * kMaxBytesPerToken; }

// The file's bytes, at most max_bytes: a regular file, a pipe or a device (-f /dev/stdin), never a directory.
// Throws kvx::Error "cannot read WHAT 'PATH': reason", "WHAT 'PATH' is a directory" or "WHAT 'PATH' is longer
// than MAX bytes".
std::string read_text_file(const std::string& path, const std::string& what, size_t max_bytes);

// One line of `in` without its newline, or nothing at the end of input. A line longer than max_bytes is
// consumed and given back as nothing in `too_long` (the caller refuses it and reads on); one that goes on past
// 16 x max_bytes (input that is not text at all) throws kvx::Error.
std::optional<std::string> read_line(std::istream& in, size_t max_bytes, bool& too_long);

}  // namespace kvx::cli
