// Which GPU backend this translation unit is compiled for. The only file that looks at
// compiler-specific macros; the rest of platform/ tests MOE_A2A_HIP / MOE_A2A_CUDA, and code
// outside platform/ tests neither.
//   MOE_A2A_HIP   : AMD ROCm (hipcc / clang -x hip, __HIP_PLATFORM_AMD__)
//   MOE_A2A_CUDA  : NVIDIA CUDA (nvcc, or a host compiler with MOE_A2A_FORCE_CUDA)
//   neither       : host-only build (no GPU runtime at all), for CPU-only logic and tests
#pragma once

// clang -x hip defines only __HIP__; __HIP_PLATFORM_AMD__ comes from hipcc / hip::host / torch's
// flags or from hip_runtime.h, which may be included after this header.
#if defined(__HIP_PLATFORM_AMD__) || defined(__HIP_PLATFORM_HCC__) || \
    (defined(__HIP__) && !defined(__HIP_PLATFORM_NVIDIA__) && !defined(__HIP_PLATFORM_NVCC__))
#define MOE_A2A_HIP 1
#elif defined(__CUDACC__) || defined(MOE_A2A_FORCE_CUDA)
#define MOE_A2A_CUDA 1
#endif

#if defined(MOE_A2A_HIP) || defined(MOE_A2A_CUDA)
#define MOE_A2A_HAS_GPU 1
#endif

// True while a GPU compiler (nvcc, or clang / hipcc for HIP) compiles this translation unit, in
// either pass: kernels, __device__ functions and __shared__ variables can be declared.
#if defined(MOE_A2A_HAS_GPU) && (defined(__CUDACC__) || defined(__HIPCC__) || defined(__HIP__))
#define MOE_A2A_GPU_COMPILER 1
#endif

// True while compiling device code (the device pass of nvcc / clang).
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define MOE_A2A_DEVICE_PASS 1
#endif

// NVIDIA's device pass: the compute capability times 100 (900 for sm_90), for the instructions
// only some GPUs have (float_ops.h).
#if defined(MOE_A2A_CUDA) && defined(__CUDA_ARCH__)
#define MOE_A2A_CUDA_ARCH __CUDA_ARCH__
#endif

#if defined(__CUDACC__) || defined(__HIPCC__) || defined(__HIP__)
#define MOE_A2A_HD __host__ __device__
#define MOE_A2A_DEVICE __device__
#define MOE_A2A_INLINE __forceinline__
#define MOE_A2A_NOINLINE __noinline__
#else
#define MOE_A2A_HD
#define MOE_A2A_DEVICE
#define MOE_A2A_INLINE inline
#define MOE_A2A_NOINLINE
#endif
