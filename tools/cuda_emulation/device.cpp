// The emulated device: one GPU with the H100 SXM's limits (sm_90, 132 SMs, 228 KiB of shared memory per SM of
// which 227 KiB can go to one block, 64 Ki registers and 2048 threads per SM), so that code sizing its work
// from the device's properties sizes it as it would on the GPU kvx targets. The name says it is emulated.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "tools/cuda_emulation/emu_device.h"

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }

cudaError_t cudaGetDevice(int* device) {
    *device = 0;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
    if (device != 0) return cudaErrorInvalidDevice;
    *prop = cudaDeviceProp{};
    std::snprintf(prop->name, sizeof prop->name, "kvx CPU emulation with H100 limits (no GPU)");
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = 132;
    prop->totalGlobalMem = size_t{80} << 30;
    prop->sharedMemPerBlock = 48 * 1024;
    prop->sharedMemPerBlockOptin = 227 * 1024;
    prop->sharedMemPerMultiprocessor = 228 * 1024;
    prop->regsPerBlock = 65536;
    prop->regsPerMultiprocessor = 65536;
    prop->maxThreadsPerBlock = 1024;
    prop->maxThreadsPerMultiProcessor = 2048;
    prop->maxBlocksPerMultiProcessor = 32;
    prop->warpSize = 32;
    prop->maxThreadsDim[0] = 1024;
    prop->maxThreadsDim[1] = 1024;
    prop->maxThreadsDim[2] = 64;
    prop->maxGridSize[0] = 2147483647;
    prop->maxGridSize[1] = 65535;
    prop->maxGridSize[2] = 65535;
    prop->l2CacheSize = 50 << 20;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
    cudaDeviceProp p;
    if (const cudaError_t e = cudaGetDeviceProperties(&p, device); e != cudaSuccess) return e;
    switch (attribute) {
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = static_cast<int>(p.sharedMemPerBlock); break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = static_cast<int>(p.sharedMemPerBlockOptin); break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = static_cast<int>(p.sharedMemPerMultiprocessor); break;
    case cudaDevAttrMaxRegistersPerMultiprocessor: *value = p.regsPerMultiprocessor; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *value = p.maxThreadsPerMultiProcessor; break;
    case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
    case cudaDevAttrWarpSize: *value = p.warpSize; break;
    case cudaDevAttrL2CacheSize: *value = p.l2CacheSize; break;
    default:
        emu_fail(("cudaDeviceGetAttribute: attribute " + std::to_string(attribute) + " is not emulated").c_str());
    }
    return cudaSuccess;
}

const char* cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    default: return "cudaError (not named by the emulation)";
    }
}

const char* cudaGetErrorString(cudaError_t e) {
    return e == cudaSuccess ? "no error" : "an error of the emulated CUDA runtime (see its name)";
}

}  // extern "C"
