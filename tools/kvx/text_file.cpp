#include "text_file.h"

#include <fstream>
#include <sstream>

#include "kernels/error.h"

namespace kvx::cli {

std::string read_text_file(const std::string& path, const std::string& what) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error("cannot read " + what + " '" + path + "'");
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

}  // namespace kvx::cli
