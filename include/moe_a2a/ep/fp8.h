// fp8 rows with block scales: the one definition of how dispatch quantizes a token, used by the
// kernels (device) and by the host tests, and mirrored op for op by moe_a2a.reference
// (quantize_fp8) so that the bytes match exactly.
//
// A token of H channels is cut into blocks of kFp8BlockElems channels (the last one shorter
// when H is not a multiple of it). For each block:
//   amax  = max |x| over the block (NaN if any element is NaN)
//   scale = max(amax, kFp8AmaxFloor) / fp8_max         (fp32, correctly rounded)
//           pow2 scales: rounded up to a power of two  (UE8M0-style, exact in 8 exponent bits)
//   q     = encode(clamp(x * (1 / scale), -fp8_max, fp8_max))   (round to nearest even)
// so x ~= q * scale. The floor gives an all-zero block a positive scale (its q are zeros). A
// block holding inf or NaN gets scale inf or NaN and dequantizes to NaN throughout: the damage
// stays in that block of that token.
//
// Two encodings of e4m3 (4 exponent bits, 3 mantissa bits):
//   e4m3fn   (NVIDIA, torch.float8_e4m3fn):   bias 7, max 448, NaN 0x7f/0xff, has -0
//   e4m3fnuz (MI300X, torch.float8_e4m3fnuz): bias 8, max 240, NaN 0x80, no -0
// Both are software encodes here, identical on every backend (so either format can be
// produced and tested anywhere); the GEMM that reads them decides which one a user needs.
// Dispatch's kernels use a hardware instruction instead where it gives the same bytes
// (csrc/ep/fp8_rows.cuh; checked against these on every fp32 bit pattern).
#pragma once

#include <cstdint>
#include <cstring>

#include "moe_a2a/platform/backend.h"
#include "moe_a2a/platform/runtime.h"  // the HIP / CUDA keywords (__forceinline__, ...)

namespace moe_a2a {

enum class Fp8Format : int32_t { kNone = 0, kE4M3Fn = 1, kE4M3Fnuz = 2 };

inline constexpr int kFp8BlockElems = 128;
inline constexpr float kFp8AmaxFloor = 1e-30f;

MOE_A2A_HD inline constexpr int fp8_bias(Fp8Format f) { return f == Fp8Format::kE4M3Fnuz ? 8 : 7; }
MOE_A2A_HD inline constexpr float fp8_max(Fp8Format f) { return f == Fp8Format::kE4M3Fnuz ? 240.0f : 448.0f; }

MOE_A2A_HD MOE_A2A_INLINE uint32_t float_bits(float f) {
#if defined(MOE_A2A_DEVICE_PASS)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}
MOE_A2A_HD MOE_A2A_INLINE float bits_float(uint32_t u) {
#if defined(MOE_A2A_DEVICE_PASS)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

// |a| with NaN kept, folded into a running block maximum that stays NaN once it saw one.
MOE_A2A_HD MOE_A2A_INLINE float amax_fold(float running, float x) {
  const float a = bits_float(float_bits(x) & 0x7fffffffu);
  return (a > running || a != a) && running == running ? a : running;
}

// The scale of a block whose largest magnitude is `amax`.
MOE_A2A_HD MOE_A2A_INLINE float fp8_block_scale(float amax, Fp8Format f, bool pow2) {
  const float a = amax < kFp8AmaxFloor ? kFp8AmaxFloor : amax;  // NaN stays NaN
  float s = a / fp8_max(f);
  if (pow2) {
    const uint32_t u = float_bits(s);
    const bool finite = (u & 0x7f800000u) != 0x7f800000u;
    // s is normal (the floor keeps it above FLT_MIN): a power of two has no mantissa bits; else
    // the next exponent up.
    if (finite && (u & 0x007fffffu) != 0u) s = bits_float((u & 0x7f800000u) + 0x00800000u);
  }
  return s;
}

// The e4m3 code of v, rounded to nearest even; |v| above the format's max saturates to it.
MOE_A2A_HD MOE_A2A_INLINE uint8_t fp8_encode(float v, Fp8Format f) {
  const uint32_t u = float_bits(v);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t mag = u & 0x7fffffffu;
  if (mag > 0x7f800000u) return f == Fp8Format::kE4M3Fnuz ? 0x80u : static_cast<uint8_t>(0x7fu | sign);
  const uint32_t max_code = f == Fp8Format::kE4M3Fnuz ? 0x7fu : 0x7eu;
  uint32_t code;
  if (mag >= float_bits(fp8_max(f))) {
    code = max_code;
  } else if ((mag >> 23) == 0u) {
    code = 0;  // zero or an fp32 subnormal: far below half the smallest fp8 step
  } else {
    const int e8 = static_cast<int>(mag >> 23) - 127 + fp8_bias(f);  // biased fp8 exponent
    const uint32_t significand = (mag & 0x007fffffu) | 0x00800000u;  // 24 bits, leading 1
    // Keep 4 significant bits (normal), or fewer below the normal range (subnormal, e8 <= 0).
    const int shift = 20 + (e8 >= 1 ? 0 : 1 - e8);
    uint32_t kept = 0;
    if (shift <= 24) {
      const uint32_t half = (1u << (shift - 1)) - 1u + ((significand >> shift) & 1u);  // ties to even
      kept = (significand + half) >> shift;
    }
    // Normal: kept is 8..16 (16 carries into the exponent); subnormal: kept is the code, 8 being
    // the smallest normal.
    code = e8 >= 1 ? (static_cast<uint32_t>(e8) << 3) + kept - 8u : kept;
  }
  if (f == Fp8Format::kE4M3Fnuz && code == 0u) return 0;  // no negative zero
  return static_cast<uint8_t>(code | sign);
}

// v * (1 / scale), clamped to the format's range, encoded. NaN stays NaN.
MOE_A2A_HD MOE_A2A_INLINE uint8_t fp8_quantize(float v, float inv_scale, Fp8Format f) {
  return fp8_encode(v * inv_scale, f);  // fp8_encode saturates, which is the clamp
}

// The value of an e4m3 code (for tests and host checks).
MOE_A2A_HD inline float fp8_decode(uint8_t c, Fp8Format f) {
  const bool fnuz = f == Fp8Format::kE4M3Fnuz;
  if (fnuz ? c == 0x80u : (c & 0x7fu) == 0x7fu) return bits_float(0x7fc00000u);
  const int e = (c >> 3) & 0xf, m = c & 0x7;
  const float mag =
      e == 0 ? static_cast<float>(m) * bits_float(static_cast<uint32_t>(127 - fp8_bias(f) - 2) << 23)
             : (1.0f + static_cast<float>(m) / 8.0f) * bits_float(static_cast<uint32_t>(e - fp8_bias(f) + 127) << 23);
  return (c & 0x80u) ? -mag : mag;
}

}  // namespace moe_a2a
