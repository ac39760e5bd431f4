// CUDA status codes turned into kvx::Error, so that a failed allocation or launch reaches the
// user as one sentence naming the call, not as a crash. Every runtime call in cuda/ goes through these.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace kvx::cuda {

// Throws kvx::Error "CUDA error in WHAT: <cudaGetErrorString>" unless status is cudaSuccess.
void check(cudaError_t status, const char* what);

// After a kernel launch: reports a bad launch configuration at once (the launch itself returns nothing).
void check_launch(const char* kernel);

// The error name and text of a status, for messages that add context of their own.
std::string describe(cudaError_t status);

}  // namespace kvx::cuda
