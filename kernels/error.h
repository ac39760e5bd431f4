// The one exception type kvx throws for bad input and exhausted resources, from the kernels up. Its message
// is a complete sentence fit for a user, without a program prefix: the CLI prints it on one line after
// "kvx: " and exits non-zero. It sits in the lowest layer so that kernel libraries (cpu/, cuda/) can throw it
// while linking nothing above kernels/.
#pragma once

#include <stdexcept>
#include <string>

namespace kvx {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace kvx
