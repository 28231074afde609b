// The small-rows grouped linear layer (grouped_gemv.h). A block takes one expert and a slab of
// output columns: each wave owns kColsPerWave columns and its lanes split the input dimension in
// 16-byte vectors, so every weight byte is loaded once a pass, by one lane, and the x vectors a
// lane loads (a few rows, from L1 / L2) serve all of the wave's columns. A pass ends with one
// butterfly sum per (column, row) and lane 0's store. Blocks of experts without rows return at once.
//
// The weights' 16-byte loads are the whole cost: a lane keeps 2 x kColsPerWave of them in flight
// and does kColsPerWave x rows x 8 fused multiply-adds a vector. Up to 4 rows a pass that keeps
// HBM the bound (80-128 registers: 2-3 blocks an SM); a pass of 8 rows held 195 registers, one
// block an SM, and was the slowest at every size measured, so there is none (bench_experts.py).
// Rows past an expert's count are never loaded (the pass repeats a valid row and drops its sums).
// A grid of only as many blocks as are resident, each listing the experts with rows and taking
// every gridDim.x-th tile of them, so that no block starts for an expert without rows, was
// slower at 2 rows a pass (2 x H200, against this one in the same call: 46.4 -> 48.3 us at one
// token a rank of bench_hf_model's model, 151 -> 169 at 8) and not kept (session 34, call 3).
#include "experts/grouped_gemv.h"

#include "ep/ep_device.cuh"

namespace moe_a2a {
namespace {

inline constexpr int kGemvThreads = 256;
inline constexpr int kColsPerWave = 4;
inline constexpr int kColsPerBlock = kGemvThreads / kWaveSize * kColsPerWave;

template <TokenType kType>
MOE_A2A_DEVICE MOE_A2A_INLINE void store_element(void* y, int64_t i, float v) {
  if constexpr (kType == TokenType::kFloat32) {
    static_cast<float*>(y)[i] = v;
  } else {
    static_cast<uint16_t*>(y)[i] = from_float<kType>(v);
  }
}

template <TokenType kType, int kRows>
__global__ void __launch_bounds__(kGemvThreads) grouped_gemv_kernel(GroupedGemv g) {
  constexpr int kElems = kVecElems<kType>;
  constexpr int kBytes = kType == TokenType::kFloat32 ? 4 : 2;
  const int e = blockIdx.y;
  const int count = g.counts[e];
  const int64_t first = g.offsets[e];
  if (count <= 0 || first < 0 || first + count > g.rows) return;
  const int col0 = blockIdx.x * kColsPerBlock + wave_id() * kColsPerWave;
  if (col0 >= g.out) return;  // no block barrier below: a wave may leave alone
  const int lane = lane_id();
  const int vecs = g.in / kElems;

  // A column past `out` reads the last column again; its sums are dropped.
  const Vec16* __restrict__ w_col[kColsPerWave];
  const char* w_expert = static_cast<const char*>(g.w) + e * g.w_expert_stride * kBytes;
#pragma unroll
  for (int c = 0; c < kColsPerWave; ++c) {
    const int col = col0 + c < g.out ? col0 + c : g.out - 1;
    w_col[c] = reinterpret_cast<const Vec16*>(w_expert + col * g.w_out_stride * kBytes);
  }

  for (int r0 = 0; r0 < count; r0 += kRows) {
    const int rows_here = count - r0 < kRows ? count - r0 : kRows;
    const Vec16* __restrict__ x_row[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = first + r0 + (r < rows_here ? r : rows_here - 1);
      x_row[r] = reinterpret_cast<const Vec16*>(static_cast<const char*>(g.x) + row * g.x_row_stride * kBytes);
    }
    float acc[kColsPerWave][kRows] = {};
#pragma unroll 2
    for (int v = lane; v < vecs; v += kWaveSize) {
      Vec16 wv[kColsPerWave];
#pragma unroll
      for (int c = 0; c < kColsPerWave; ++c) wv[c] = w_col[c][v];
      float xf[kRows][8];
#pragma unroll
      for (int r = 0; r < kRows; ++r) unpack_vec<kType>(x_row[r][v], xf[r]);
#pragma unroll
      for (int c = 0; c < kColsPerWave; ++c) {
        float wf[8];
        unpack_vec<kType>(wv[c], wf);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
#pragma unroll
          for (int i = 0; i < kElems; ++i) acc[c][r] = fmaf(wf[i], xf[r][i], acc[c][r]);
        }
      }
    }
#pragma unroll
    for (int c = 0; c < kColsPerWave; ++c) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float sum = wave_sum(acc[c][r]);
        if (lane == 0 && r < rows_here && col0 + c < g.out) {
          store_element<kType>(g.y, (first + r0 + r) * g.out + col0 + c, sum);
        }
      }
    }
  }
}

template <TokenType kType>
void launch_typed(const GroupedGemv& g, int rows_per_pass, hipStream_t stream) {
  const dim3 grid((g.out + kColsPerBlock - 1) / kColsPerBlock, g.experts);
  const dim3 block(kGemvThreads);
  switch (rows_per_pass) {
    case 1:
      return launch_kernel(grouped_gemv_kernel<kType, 1>, grid, block, stream, false, g);
    case 2:
      return launch_kernel(grouped_gemv_kernel<kType, 2>, grid, block, stream, false, g);
    case 4:
      return launch_kernel(grouped_gemv_kernel<kType, 4>, grid, block, stream, false, g);
  }
  MOE_A2A_CHECK(false, "grouped_gemv: rows_per_pass must be 1, 2 or 4, got ", rows_per_pass);
}

}  // namespace

void launch_grouped_gemv(const GroupedGemv& g, int rows_per_pass, hipStream_t stream) {
  MOE_A2A_CHECK(g.experts > 0 && g.out > 0 && g.in > 0, "grouped_gemv: empty shape");
  MOE_A2A_CHECK(g.experts <= kGemvMaxExperts, "grouped_gemv: at most ", kGemvMaxExperts, " experts, got ", g.experts);
  if (g.type == TokenType::kBFloat16) return launch_typed<TokenType::kBFloat16>(g, rows_per_pass, stream);
  if (g.type == TokenType::kFloat16) return launch_typed<TokenType::kFloat16>(g, rows_per_pass, stream);
  return launch_typed<TokenType::kFloat32>(g, rows_per_pass, stream);
}

}  // namespace moe_a2a
