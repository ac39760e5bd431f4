// Writing to standard output with a failed write treated as an error, not as lost text nobody hears of: on a
// full disk (> /dev/full) or a closed terminal kvx stops with one line on stderr and a non-zero exit.
#pragma once

#include <string_view>

namespace kvx::cli {

// Writes and flushes `text` (streamed output is seen as it is made). Throws kvx::Error "cannot write to
// standard output: REASON".
void write_out(std::string_view text);

}  // namespace kvx::cli
