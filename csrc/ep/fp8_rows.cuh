// fp8 rows in dispatch: quantizing a chunk of a token row in the send half, and where the bytes
// and scales of a row go. The arithmetic is include/moe_a2a/ep/fp8.h; the wire row (the
// first EpConfig::wire_row_bytes() of a recv_x slot) is the hidden fp8 bytes, then
// scale_blocks() fp32 scales.
#pragma once

#include "ep_device.cuh"
#include "moe_a2a/ep/fp8.h"
#include "moe_a2a/platform/float_ops.h"

namespace moe_a2a {

// Consecutive lanes whose 16-byte vectors of a chunk make up one scale block. A chunk's vector u
// of lane l is vector chunk * kChunkVecs + u * kWaveSize + l of the row, so each aligned group of
// this many lanes holds one block (the row's last block may be short: lanes past the row hold
// nothing).
template <TokenType kType>
inline constexpr int kLanesPerScaleBlock = kFp8BlockElems / kVecElems<kType>;
static_assert(kFp8BlockElems % 8 == 0 && kFp8BlockElems / 4 <= kWaveSize, "a scale block fits one wave's vectors");

// A lane's share of one quantized chunk: the fp8 bytes of each of its vectors (8, or 4 for fp32
// tokens) and the scale of the block each belongs to.
struct Fp8Chunk {
  uint32_t lo[kUnroll], hi[kUnroll];
  float scale[kUnroll];
};

// The device forms of fp8.h's amax_fold and fp8_encode. Where the hardware has an instruction
// that gives the same bytes (platform/float_ops.h: max_nan; e4m3x2_cvt_satfinite, e4m3fn only),
// it is used: the software forms take tens of instructions an element, and dispatch quantizes
// every element it sends, so they made the fp8 kernels half again as large as the bf16 one
// (docs/design/protocol.md, "Code size"). fp8_selfcheck.cu compares them with the software forms
// on every fp32 bit pattern (tests/python/gpu/test_fp8.py runs it). A NaN's payload and sign may
// differ (not part of the contract: fp8.h). gfx942's v_cvt_pk_fp8_f32 (e4m3fnuz) is not used: it
// is unchecked on hardware here.
MOE_A2A_DEVICE MOE_A2A_INLINE float amax_fold_device(float running, float x) {
#if defined(MOE_A2A_HAS_MAX_NAN)
  return max_nan(running, fabsf(x));
#else
  return amax_fold(running, x);
#endif
}

// The codes of v[0..3], each times inv_scale, in one word (v[0] in the low byte).
template <Fp8Format kFmt>
MOE_A2A_DEVICE MOE_A2A_INLINE uint32_t quantize4(const float* v, float inv_scale) {
#if defined(MOE_A2A_HAS_E4M3X2_CVT)
  if constexpr (kFmt == Fp8Format::kE4M3Fn) {
    const uint16_t lo = e4m3x2_cvt_satfinite(v[1] * inv_scale, v[0] * inv_scale);
    const uint16_t hi = e4m3x2_cvt_satfinite(v[3] * inv_scale, v[2] * inv_scale);
    return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
  }
#endif
  uint32_t word = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) word |= static_cast<uint32_t>(fp8_quantize(v[i], inv_scale, kFmt)) << (8 * i);
  return word;
}

// Quantizes chunk `chunk` of a row of the token type, loaded in v (vectors past `vecs` were not),
// into format kFmt (a template argument: each kernel carries one encoder).
// Every lane of the wave must call it (the block maxima are reduced across lanes).
template <TokenType kType, Fp8Format kFmt>
MOE_A2A_DEVICE MOE_A2A_INLINE void quantize_chunk(const Vec16 (&v)[kUnroll], int chunk, int vecs, bool pow2,
                                                  Fp8Chunk& out) {
  const int first = chunk * kChunkVecs + lane_id();
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    float f[8];
    unpack_vec<kType>(v[u], f);
    float amax = 0.0f;
    if (first + u * kWaveSize < vecs) {
#pragma unroll
      for (int i = 0; i < kVecElems<kType>; ++i) amax = amax_fold_device(amax, f[i]);
    }
#pragma unroll
    for (int m = kLanesPerScaleBlock<kType> / 2; m > 0; m /= 2) amax = amax_fold_device(amax, wave_shfl_xor(amax, m));
    const float scale = fp8_block_scale(amax, kFmt, pow2);
    const float inv = 1.0f / scale;
    out.lo[u] = quantize4<kFmt>(f, inv);
    out.hi[u] = 0u;
    if constexpr (kVecElems<kType> == 8) out.hi[u] = quantize4<kFmt>(f + 4, inv);
    out.scale[u] = scale;
  }
}

// Stores a lane's share of a quantized chunk into a row of `hidden` fp8 bytes whose scales are at
// `scales` (a wire row's follow its bytes: wire_scales; a row of expert_x has its own row of
// expert_x_scale); the first lane of each block stores its scale.
template <TokenType kType>
MOE_A2A_DEVICE MOE_A2A_INLINE void store_fp8_chunk(uint8_t* bytes, float* scales, int chunk, int vecs,
                                                   const Fp8Chunk& in) {
  const int first = chunk * kChunkVecs + lane_id();
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int i = first + u * kWaveSize;
    if (i >= vecs) continue;
    const int elem = i * kVecElems<kType>;
    if constexpr (kVecElems<kType> == 8) {
      *reinterpret_cast<uint2*>(bytes + elem) = uint2{in.lo[u], in.hi[u]};
    } else {
      *reinterpret_cast<uint32_t*>(bytes + elem) = in.lo[u];
    }
    if (elem % kFp8BlockElems == 0) scales[elem / kFp8BlockElems] = in.scale[u];
  }
}

// The scales of a wire row, after its fp8 bytes.
MOE_A2A_DEVICE MOE_A2A_INLINE float* wire_scales(void* wire, int hidden) {
  return reinterpret_cast<float*>(static_cast<uint8_t*>(wire) + hidden);
}
MOE_A2A_DEVICE MOE_A2A_INLINE const float* wire_scales(const void* wire, int hidden) {
  return reinterpret_cast<const float*>(static_cast<const uint8_t*>(wire) + hidden);
}

}  // namespace moe_a2a
