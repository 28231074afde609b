// Device-side compatibility: wave size, lane masks, lane id, ballot, shuffle, wall-clock timer.
// Kernels use these names and never test the backend themselves.
#pragma once

#include <cstdint>

#include "moe_a2a/platform/backend.h"
#include "moe_a2a/platform/runtime.h"

namespace moe_a2a {

#if defined(MOE_A2A_HIP)
// CDNA (gfx9) runs 64-wide waves. ROCm 7 made warpSize a runtime value, so keep our own.
inline constexpr int kWaveSize = 64;
using LaneMask = uint64_t;
#elif defined(MOE_A2A_CUDA)
inline constexpr int kWaveSize = 32;
using LaneMask = uint32_t;
#else
inline constexpr int kWaveSize = 32;  // host-only builds: value unused by any kernel
using LaneMask = uint32_t;
#endif

// How many consecutive blocks of a launch land on different dies, so that blocks b and b + kDieStride share one.
// An MI300X (gfx942) deals a launch's workgroups to its 8 XCDs in turn, workgroup b to XCD b mod 8, each XCD with its
// own L2 and its own port into the fabric: a role given by b's parity would run on 4 of the 8 XCDs, one given by
// (b / kDieStride)'s parity runs on every XCD, half of each XCD's blocks (on an MI300A's 6 XCDs also about half).
// NVIDIA's H100 and H200 are one die.
#if defined(MOE_A2A_HIP)
inline constexpr int kDieStride = 8;
#else
inline constexpr int kDieStride = 1;
#endif

#if defined(MOE_A2A_GPU_COMPILER)

MOE_A2A_DEVICE MOE_A2A_INLINE int lane_id() { return static_cast<int>(threadIdx.x) % kWaveSize; }
MOE_A2A_DEVICE MOE_A2A_INLINE int wave_id() { return static_cast<int>(threadIdx.x) / kWaveSize; }

#if defined(MOE_A2A_HIP)

MOE_A2A_DEVICE MOE_A2A_INLINE LaneMask wave_ballot(bool pred) { return __ballot(pred); }
template <typename T>
MOE_A2A_DEVICE MOE_A2A_INLINE T wave_shfl(T v, int src_lane) {
  return __shfl(v, src_lane, kWaveSize);
}
template <typename T>
MOE_A2A_DEVICE MOE_A2A_INLINE T wave_shfl_xor(T v, int lane_mask) {
  return __shfl_xor(v, lane_mask, kWaveSize);
}
// s_memrealtime ticks at a constant rate independent of the shader clock; the host reads the
// rate from hipDeviceAttributeWallClockRate (wall_clock_rate_hz below).
MOE_A2A_DEVICE MOE_A2A_INLINE uint64_t wall_clock() { return __builtin_amdgcn_s_memrealtime(); }

#else  // CUDA

MOE_A2A_DEVICE MOE_A2A_INLINE LaneMask wave_ballot(bool pred) { return __ballot_sync(0xffffffffu, pred); }
template <typename T>
MOE_A2A_DEVICE MOE_A2A_INLINE T wave_shfl(T v, int src_lane) {
  return __shfl_sync(0xffffffffu, v, src_lane);
}
template <typename T>
MOE_A2A_DEVICE MOE_A2A_INLINE T wave_shfl_xor(T v, int lane_mask) {
  return __shfl_xor_sync(0xffffffffu, v, lane_mask);
}
// %globaltimer counts nanoseconds (about 32 ns granularity) and is the same clock on all SMs.
MOE_A2A_DEVICE MOE_A2A_INLINE uint64_t wall_clock() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

#endif

// Asks L2 to fetch [p, p + bytes) and goes on at once: a hint that no register waits for (p and
// bytes multiples of 16). NVIDIA from sm_90: one bulk prefetch, fetched by the SM's copy engine.
// Elsewhere nothing: gfx942 has no instruction that fills L2 without loading into registers
// (l2_prefetch_bytes says 0 there).
MOE_A2A_DEVICE MOE_A2A_INLINE void prefetch_l2(const void* p, uint32_t bytes) {
#if defined(MOE_A2A_CUDA_ARCH) && MOE_A2A_CUDA_ARCH >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(__cvta_generic_to_global(p)), "r"(bytes));
#else
  (void)p;
  (void)bytes;
#endif
}

// Sum of v over the lanes of the wave, in every lane (butterfly: a fixed order, so the same
// inputs give the same bits).
MOE_A2A_DEVICE MOE_A2A_INLINE float wave_sum(float v) {
#pragma unroll
  for (int m = kWaveSize / 2; m > 0; m /= 2) v += wave_shfl_xor(v, m);
  return v;
}
#endif  // device code

#if defined(MOE_A2A_HAS_GPU)
// Ticks per second of wall_clock() on `device`.
inline double wall_clock_rate_hz(int device) {
#if defined(MOE_A2A_HIP)
  int khz = 0;
  MOE_A2A_GPU_CHECK(hipDeviceGetAttribute(&khz, hipDeviceAttributeWallClockRate, device));
  MOE_A2A_CHECK(khz > 0, "device ", device, " reports wall clock rate ", khz, " kHz");
  return 1000.0 * khz;
#else
  (void)device;
  return 1e9;
#endif
}

// L2's size on `device` where prefetch_l2 fetches anything (NVIDIA, compute capability 9 on), else 0.
inline size_t l2_prefetch_bytes(int device) {
#if defined(MOE_A2A_CUDA)
  int major = 0, bytes = 0;
  MOE_A2A_GPU_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  MOE_A2A_GPU_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, device));
  return major >= 9 && bytes > 0 ? static_cast<size_t>(bytes) : 0;
#else
  (void)device;
  return 0;
#endif
}
#endif

}  // namespace moe_a2a
