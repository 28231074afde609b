// fp8 rows in dispatch: quantizing a chunk of a token row in the send half, and where the bytes
// and scales of a row go. The arithmetic is include/moe_a2a/ep/fp8.h; the wire row (the
// first EpConfig::wire_row_bytes() of a recv_x slot) is the hidden fp8 bytes, then
// scale_blocks() fp32 scales.
#pragma once

#include "ep_device.cuh"
#include "moe_a2a/ep/fp8.h"

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

// Quantizes chunk `chunk` of a row of the token type, loaded in v (vectors past `vecs` were not).
// Every lane of the wave must call it (the block maxima are reduced across lanes).
template <TokenType kType>
MOE_A2A_DEVICE MOE_A2A_INLINE void quantize_chunk(const Vec16 (&v)[kUnroll], int chunk, int vecs, Fp8Format fmt,
                                                  bool pow2, Fp8Chunk& out) {
  const int first = chunk * kChunkVecs + lane_id();
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    float f[8];
    unpack_vec<kType>(v[u], f);
    float amax = 0.0f;
    if (first + u * kWaveSize < vecs) {
#pragma unroll
      for (int i = 0; i < kVecElems<kType>; ++i) amax = amax_fold(amax, f[i]);
    }
#pragma unroll
    for (int m = kLanesPerScaleBlock<kType> / 2; m > 0; m /= 2) amax = amax_fold(amax, wave_shfl_xor(amax, m));
    const float scale = fp8_block_scale(amax, fmt, pow2);
    const float inv = 1.0f / scale;
    uint32_t bytes[2] = {0u, 0u};
#pragma unroll
    for (int i = 0; i < kVecElems<kType>; ++i) {
      bytes[i / 4] |= static_cast<uint32_t>(fp8_quantize(f[i], inv, fmt)) << (8 * (i % 4));
    }
    out.lo[u] = bytes[0];
    out.hi[u] = bytes[1];
    out.scale[u] = scale;
  }
}

// Stores a lane's share of a quantized chunk into a wire row (`hidden` fp8 bytes, then scales);
// the first lane of each block stores its scale.
template <TokenType kType>
MOE_A2A_DEVICE MOE_A2A_INLINE void store_fp8_chunk(uint8_t* wire, int hidden, int chunk, int vecs, const Fp8Chunk& in) {
  const int first = chunk * kChunkVecs + lane_id();
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int i = first + u * kWaveSize;
    if (i >= vecs) continue;
    const int elem = i * kVecElems<kType>;
    if constexpr (kVecElems<kType> == 8) {
      *reinterpret_cast<uint2*>(wire + elem) = uint2{in.lo[u], in.hi[u]};
    } else {
      *reinterpret_cast<uint32_t*>(wire + elem) = in.lo[u];
    }
    if (elem % kFp8BlockElems == 0) reinterpret_cast<float*>(wire + hidden)[elem / kFp8BlockElems] = in.scale[u];
  }
}

// The scales of a wire row, after its fp8 bytes.
MOE_A2A_DEVICE MOE_A2A_INLINE float* wire_scales(void* wire, int hidden) {
  return reinterpret_cast<float*>(static_cast<uint8_t*>(wire) + hidden);
}

}  // namespace moe_a2a
