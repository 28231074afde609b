// Float conversions some GPUs do in one instruction, and the fp16 intrinsics' header. Each
// MOE_A2A_HAS_<instruction> says whether this compilation pass has the instruction, and so its
// function here; callers keep a software form of the same rounding for passes without it. A pair
// conversion takes its operands in the instruction's order: the high half first.
#pragma once

#include <cstdint>

#include "moe_a2a/platform/backend.h"

#if defined(MOE_A2A_GPU_COMPILER)

#if defined(MOE_A2A_HIP)
#include <hip/hip_fp16.h>
#elif defined(MOE_A2A_CUDA)
#include <cuda_fp16.h>
#endif

namespace moe_a2a {

MOE_A2A_DEVICE MOE_A2A_INLINE float half_bits_to_float(uint16_t bits) { return __half2float(__ushort_as_half(bits)); }
MOE_A2A_DEVICE MOE_A2A_INLINE uint16_t float_to_half_bits(float f) { return __half_as_ushort(__float2half_rn(f)); }

#if defined(MOE_A2A_CUDA_ARCH) && MOE_A2A_CUDA_ARCH >= 800
#define MOE_A2A_HAS_BF16X2_CVT 1
#define MOE_A2A_HAS_MAX_NAN 1

// hi and lo rounded to bf16 (to nearest even) in one word, lo in the low half; a NaN stays NaN,
// its payload not kept.
MOE_A2A_DEVICE MOE_A2A_INLINE uint32_t bf16x2_cvt_rn(float hi, float lo) {
  uint32_t w;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
  return w;
}

// The larger of a and b, NaN if either is (its payload not kept).
MOE_A2A_DEVICE MOE_A2A_INLINE float max_nan(float a, float b) {
  float m;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(m) : "f"(a), "f"(b));
  return m;
}
#endif

#if defined(MOE_A2A_CUDA_ARCH) && MOE_A2A_CUDA_ARCH >= 890
#define MOE_A2A_HAS_E4M3X2_CVT 1

// hi and lo as e4m3fn codes in one half-word, lo in the low byte: round to nearest even,
// saturating to +-448, NaN to NaN (whose sign may differ from the input's).
MOE_A2A_DEVICE MOE_A2A_INLINE uint16_t e4m3x2_cvt_satfinite(float hi, float lo) {
  uint16_t w;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(w) : "f"(hi), "f"(lo));
  return w;
}
#endif

}  // namespace moe_a2a

#endif  // MOE_A2A_GPU_COMPILER
