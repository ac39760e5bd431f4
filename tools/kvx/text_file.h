// Reading a whole text file named on the command line (a prompt, a text to tokenize).
#pragma once

#include <string>

namespace kvx::cli {

// The file's bytes; throws kvx::Error "cannot read WHAT 'PATH'" when it cannot be opened.
std::string read_text_file(const std::string& path, const std::string& what);

}  // namespace kvx::cli
