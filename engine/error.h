// The one exception type kvx throws for bad input and exhausted resources. Its message is a complete
// sentence fit for a user: the CLI prints it on one line after "kvx: " and exits non-zero.
#pragma once

#include <stdexcept>
#include <string>

namespace kvx {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace kvx
