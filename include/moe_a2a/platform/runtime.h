// Host runtime API. Code is spelled with hip* names; on NVIDIA this header maps exactly the
// names the library uses to their cuda* equivalents. Adding a call means adding its mapping
// here, so the list doubles as the inventory of runtime calls we depend on. A call that differs
// by more than its name is a function here (allocate_peer_visible).
#pragma once

#include "moe_a2a/platform/backend.h"

#include <cstddef>
#include <stdexcept>
#include <string>

#include "moe_a2a/format.h"

#if defined(MOE_A2A_HIP)
#include <hip/hip_runtime.h>

// Real builds need ROCm >= 5.3 (uncached fine-grained malloc, wall-clock rate attribute).
// CI compile-checks the AMD code with Debian's HIP 5.2 headers, which predate those two
// names; MOE_A2A_COMPILE_CHECK_ONLY lets that check through and nothing else.
#if HIP_VERSION < 50300000
#if !defined(MOE_A2A_COMPILE_CHECK_ONLY)
#error "moe_a2a needs ROCm >= 5.3"
#endif
#define hipDeviceMallocUncached 0x3
#define hipDeviceAttributeWallClockRate hipDeviceAttributeClockRate
#endif
#elif defined(MOE_A2A_CUDA)
#include <cuda_runtime.h>

using hipError_t = cudaError_t;
using hipStream_t = cudaStream_t;
using hipEvent_t = cudaEvent_t;
using hipIpcMemHandle_t = cudaIpcMemHandle_t;
using hipDeviceProp_t = cudaDeviceProp;
#define hipSuccess cudaSuccess
#define hipErrorNotReady cudaErrorNotReady
#define hipGetErrorString cudaGetErrorString
#define hipGetLastError cudaGetLastError
#define hipGetDevice cudaGetDevice
#define hipSetDevice cudaSetDevice
#define hipGetDeviceCount cudaGetDeviceCount
#define hipDeviceGetAttribute cudaDeviceGetAttribute
#define hipDeviceAttributeMultiprocessorCount cudaDevAttrMultiProcessorCount
#define hipDeviceAttributeClockRate cudaDevAttrClockRate
#define hipMalloc cudaMalloc
#define hipFree cudaFree
#define hipMemset cudaMemset
#define hipMemsetAsync cudaMemsetAsync
#define hipMemcpy cudaMemcpy
#define hipMemcpyAsync cudaMemcpyAsync
#define hipMemcpyDefault cudaMemcpyDefault
#define hipMemcpyHostToDevice cudaMemcpyHostToDevice
#define hipMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define hipHostMalloc(ptr, size, flags) cudaHostAlloc(ptr, size, flags)
#define hipHostMallocMapped cudaHostAllocMapped
#define hipHostFree cudaFreeHost
#define hipHostGetDevicePointer cudaHostGetDevicePointer
#define hipIpcGetMemHandle cudaIpcGetMemHandle
#define hipIpcOpenMemHandle cudaIpcOpenMemHandle
#define hipIpcCloseMemHandle cudaIpcCloseMemHandle
#define hipIpcMemLazyEnablePeerAccess cudaIpcMemLazyEnablePeerAccess
#define hipDeviceSynchronize cudaDeviceSynchronize
#define hipStreamSynchronize cudaStreamSynchronize
#define hipMemGetInfo cudaMemGetInfo
#endif

namespace moe_a2a {

// Thrown for every runtime failure; Python sees it as RuntimeError with file and line.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void throw_error(const char* file, int line, const std::string& what) {
  throw Error(cat("moe_a2a: ", what, " (", file, ":", line, ")"));
}

}  // namespace moe_a2a

// MOE_A2A_CHECK(cond, "message parts ", 42, " joined by cat()")
#define MOE_A2A_CHECK(cond, ...)                                               \
  do {                                                                         \
    if (!(cond)) {                                                             \
      ::moe_a2a::throw_error(__FILE__, __LINE__, ::moe_a2a::cat(__VA_ARGS__)); \
    }                                                                          \
  } while (0)

#if defined(MOE_A2A_HAS_GPU)
#define MOE_A2A_GPU_CHECK(expr)                                                                                       \
  do {                                                                                                                \
    hipError_t moe_a2a_err_ = (expr);                                                                                 \
    if (moe_a2a_err_ != hipSuccess) {                                                                                 \
      ::moe_a2a::throw_error(__FILE__, __LINE__, std::string(#expr) + " failed: " + hipGetErrorString(moe_a2a_err_)); \
    }                                                                                                                 \
  } while (0)

namespace moe_a2a {

// Memory that peers write and poll must be coherent at system scope. On MI300X that means
// fine-grained uncached memory; plain hipMalloc would only be coherent within the device.
inline void* allocate_peer_visible(size_t bytes) {
  void* p = nullptr;
#if defined(MOE_A2A_HIP)
  MOE_A2A_GPU_CHECK(hipExtMallocWithFlags(&p, bytes, hipDeviceMallocUncached));
#else
  MOE_A2A_GPU_CHECK(hipMalloc(&p, bytes));
#endif
  return p;
}

}  // namespace moe_a2a
#endif
