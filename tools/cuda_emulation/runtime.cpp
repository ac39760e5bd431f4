// Host-memory stand-ins for the CUDA runtime calls the kernels' launch functions and the tests make.
#include <cuda_runtime_api.h>
#include <cstdlib>
#include <cstring>
#include <string>
#include "kernels/error.h"
extern "C" {
// 256-byte aligned as cudaMalloc's, exact size so ASan sees one element past the end.
cudaError_t cudaMalloc(void** p, size_t n) { return posix_memalign(p, 256, n ? n : 1) == 0 ? cudaSuccess : cudaErrorMemoryAllocation; }
cudaError_t cudaFree(void* p) { std::free(p); return cudaSuccess; }
cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) { if (n) std::memcpy(d, s, n); return cudaSuccess; }
cudaError_t cudaMemset(void* d, int v, size_t n) { if (n) std::memset(d, v, n); return cudaSuccess; }
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
cudaError_t cudaGetLastError() { return cudaSuccess; }
cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr, int) { *v = 132; return cudaSuccess; }
}
namespace kvx::cuda {
void check(cudaError_t s, const char* what) { if (s != cudaSuccess) throw Error(std::string("emu error in ") + what); }
void check_launch(const char*) {}
std::string describe(cudaError_t) { return "emu"; }
}
