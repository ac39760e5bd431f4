// Whether this process can use a CUDA device, and if not, why: the CLI's error for --device cuda and the
// CUDA tests' skip message both come from here.
#pragma once

#include <string>

namespace kvx::cuda {

// Empty when device 0 is usable; otherwise a sentence saying why not (no driver, no device, ...).
std::string unavailable_reason();

// "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB)" for device 0; unavailable_reason() must be empty.
std::string device_description();

}  // namespace kvx::cuda
