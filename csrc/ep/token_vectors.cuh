// 16-byte token vectors: rows moved a chunk a wave (load_chunk, store_chunk), token elements to and
// from fp32, and the arithmetic of combine and the backward on them (fma_vec, sum_row_chunks,
// dot_vec, pack_vec). Used by the EP kernels (through ep_device.cuh) and by the experts' grouped GEMV.
#pragma once

#include <cstdint>

#include "moe_a2a/ep/kernels.h"
#include "moe_a2a/platform/device.h"
#include "moe_a2a/platform/float_ops.h"

namespace moe_a2a {

// 16 bytes = 8 bf16/fp16 or 4 fp32 token elements; rows are a multiple of 16 bytes because
// hidden % 8 == 0.
using Vec16 = uint4;

// Rows are moved in chunks: one wave moves one chunk, each lane keeping kUnroll 16-byte
// loads in flight before it stores. A chunk rather than a whole row is the unit of work so
// that few rows (small batches) still spread over every wave of a block, and so that the
// loads of a lane are independent (a row moved by one thread at a time is latency-bound).
inline constexpr int kUnroll = 4;
inline constexpr int kChunkVecs = kWaveSize * kUnroll;

MOE_A2A_DEVICE MOE_A2A_INLINE int chunks_per_row(int vecs) { return (vecs + kChunkVecs - 1) / kChunkVecs; }

// Loads this lane's vectors of `chunk` of a row (those past `vecs` are left alone).
MOE_A2A_DEVICE MOE_A2A_INLINE void load_chunk(const Vec16* __restrict__ row, int chunk, int vecs, Vec16 (&v)[kUnroll]) {
  const int first = chunk * kChunkVecs + lane_id();
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int i = first + u * kWaveSize;
    if (i < vecs) v[u] = row[i];
  }
}
MOE_A2A_DEVICE MOE_A2A_INLINE void store_chunk(Vec16* __restrict__ row, int chunk, int vecs,
                                               const Vec16 (&v)[kUnroll]) {
  const int first = chunk * kChunkVecs + lane_id();
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int i = first + u * kWaveSize;
    if (i < vecs) row[i] = v[u];
  }
}

// ---- token element conversions (bf16 by bit manipulation, fp16 by intrinsics) ----
MOE_A2A_DEVICE MOE_A2A_INLINE float bf16_bits_to_float(uint16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}
MOE_A2A_DEVICE MOE_A2A_INLINE uint16_t float_to_bf16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);                                  // round to nearest even
  return static_cast<uint16_t>((u + rounding) >> 16);
}

// lo and hi rounded to bf16 (to nearest even) in one 32-bit word, lo in the low half. Where the
// GPU has one instruction for the pair it is used: the bit manipulation above takes about ten
// per element, and combine packs every element it writes: its code size is on the critical path
// (docs/design/protocol.md, "Code size"). Both round the same way; only a NaN's payload differs.
MOE_A2A_DEVICE MOE_A2A_INLINE uint32_t pack_bf16x2(float lo, float hi) {
#if defined(MOE_A2A_HAS_BF16X2_CVT)
  return bf16x2_cvt_rn(hi, lo);
#else
  return static_cast<uint32_t>(float_to_bf16_bits(lo)) | (static_cast<uint32_t>(float_to_bf16_bits(hi)) << 16);
#endif
}

// Token elements per 16-byte vector.
template <TokenType kType>
inline constexpr int kVecElems = kType == TokenType::kFloat32 ? 4 : 8;

template <TokenType kType>
MOE_A2A_DEVICE MOE_A2A_INLINE float to_float(uint16_t bits) {
  if constexpr (kType == TokenType::kBFloat16) {
    return bf16_bits_to_float(bits);
  } else {
    return half_bits_to_float(bits);
  }
}
template <TokenType kType>
MOE_A2A_DEVICE MOE_A2A_INLINE uint16_t from_float(float f) {
  if constexpr (kType == TokenType::kBFloat16) {
    return float_to_bf16_bits(f);
  } else {
    return float_to_half_bits(f);
  }
}

// v rounded to the element type, as a value stored and read back would be.
template <TokenType kType>
MOE_A2A_DEVICE MOE_A2A_INLINE float rounded(float v) {
  if constexpr (kType == TokenType::kFloat32) {
    return v;
  } else {
    return to_float<kType>(from_float<kType>(v));
  }
}

// The kVecElems<kType> elements of v as floats, in memory order.
template <TokenType kType>
MOE_A2A_DEVICE MOE_A2A_INLINE void unpack_vec(const Vec16& v, float (&f)[8]) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (kType == TokenType::kFloat32) {
      f[i] = __uint_as_float(words[i]);
    } else {
      f[2 * i] = to_float<kType>(static_cast<uint16_t>(words[i] & 0xffffu));
      f[2 * i + 1] = to_float<kType>(static_cast<uint16_t>(words[i] >> 16));
    }
  }
}

// acc += w * v element-wise (acc[0 .. kVecElems - 1]), fp32 fused multiply-add in a fixed order.
template <TokenType kType>
MOE_A2A_DEVICE MOE_A2A_INLINE void fma_vec(float (&acc)[8], float w, const Vec16& v) {
  float f[8];
  unpack_vec<kType>(v, f);
#pragma unroll
  for (int i = 0; i < kVecElems<kType>; ++i) acc[i] = fmaf(w, f[i], acc[i]);
}

// Rows whose chunks a lane keeps in flight at once when it sums several rows.
inline constexpr int kSumInFlight = 4;

// acc += weight(i) * (chunk `chunk` of row(i)) for i = 0 .. n - 1, element-wise, fp32 fused
// multiply-add in ascending i (a fixed order, so the sum is bitwise reproducible). The rows
// are independent, so the loads (and weights) of kSumInFlight of them are issued before the
// first is added: one memory latency per kSumInFlight rows, not one per row. n, row and
// weight must be the same on every lane of the wave (they may shuffle).
template <TokenType kType, typename RowOf, typename WeightOf>
MOE_A2A_DEVICE MOE_A2A_INLINE void sum_row_chunks(float (&acc)[kUnroll][8], int n, RowOf row, WeightOf weight,
                                                  int chunk, int vecs) {
  for (int first = 0; first < n; first += kSumInFlight) {
    Vec16 v[kSumInFlight][kUnroll];
    float w[kSumInFlight];
#pragma unroll
    for (int q = 0; q < kSumInFlight; ++q) {
      if (first + q >= n) break;
      load_chunk(row(first + q), chunk, vecs, v[q]);  // first: a weight may wait for a load of its own
      w[q] = weight(first + q);
    }
#pragma unroll
    for (int q = 0; q < kSumInFlight; ++q) {
      if (first + q >= n) break;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) fma_vec<kType>(acc[u], w[q], v[q][u]);
    }
  }
}

// Sum of a[i] * b[i] over the vector's elements, in fp32.
template <TokenType kType>
MOE_A2A_DEVICE MOE_A2A_INLINE float dot_vec(const Vec16& a, const Vec16& b) {
  float fa[8], fb[8];
  unpack_vec<kType>(a, fa);
  unpack_vec<kType>(b, fb);
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < kVecElems<kType>; ++i) s = fmaf(fa[i], fb[i], s);
  return s;
}

// acc[0 .. kVecElems - 1] rounded to the token type, as one vector.
template <TokenType kType>
MOE_A2A_DEVICE MOE_A2A_INLINE Vec16 pack_vec(const float (&acc)[8]) {
  uint32_t words[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (kType == TokenType::kFloat32) {
      words[i] = __float_as_uint(acc[i]);
    } else if constexpr (kType == TokenType::kBFloat16) {
      words[i] = pack_bf16x2(acc[2 * i], acc[2 * i + 1]);
    } else {
      words[i] = static_cast<uint32_t>(from_float<kType>(acc[2 * i])) |
                 (static_cast<uint32_t>(from_float<kType>(acc[2 * i + 1])) << 16);
    }
  }
  return Vec16{words[0], words[1], words[2], words[3]};
}

// Dispatches a kernel template on the runtime token type.
#define MOE_A2A_DISPATCH_TOKEN_TYPE(type, K, ...)          \
  do {                                                     \
    if ((type) == ::moe_a2a::TokenType::kBFloat16) {       \
      constexpr auto K = ::moe_a2a::TokenType::kBFloat16;  \
      __VA_ARGS__;                                         \
    } else if ((type) == ::moe_a2a::TokenType::kFloat16) { \
      constexpr auto K = ::moe_a2a::TokenType::kFloat16;   \
      __VA_ARGS__;                                         \
    } else {                                               \
      constexpr auto K = ::moe_a2a::TokenType::kFloat32;   \
      __VA_ARGS__;                                         \
    }                                                      \
  } while (0)

}  // namespace moe_a2a
