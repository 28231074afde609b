// The small-rows grouped linear layer (grouped_gemv.h): one kernel for w contiguous along in
// (nn.Linear's layout per expert), one further down for w contiguous along out.
//
// Along in. A block takes one expert and a slab of output columns: each wave owns kColsPerWave
// columns and its lanes split the input dimension in 16-byte vectors, so every weight byte is
// loaded once a pass, by one lane, and the x vectors a lane loads (a few rows, from L1 / L2) serve
// all of the wave's columns. A pass ends with one butterfly sum per (column, row) and lane 0's
// store. Blocks of experts without rows return at once.
//
// The weights' 16-byte loads are the whole cost. A pass is a body of 1, 2 or 4 rows; in the
// automatic mode (rows_per_pass 0) each pass takes the expert's remaining rows in the narrowest
// body that holds them, so a pass computes no row that it drops and an expert of 5 rows reads its
// weights twice (at 2 rows a pass, three times). Against the better of a fixed 2 or 4 rows a pass it took 5-10%
// less time from 1 row an expert on average to 4, 3-7% at 0.5, and was within 6% either way
// below (one H200, bench_experts.py, session 35, call 2). It holds the 4-row body's registers
// (128: 2 blocks an SM), so at a tenth of a row an expert the 1-row kernel (60: 4 blocks) is
// faster and grouped_gemv.py's rule takes it. The 1-row body keeps 4 loads of each column in
// flight, the wider ones 2: that took the 1-row kernel from 48.0 to 43.2 us at one token a rank
// of bench_hf_model's model (call 3). A pass of 8 rows held 195 registers, one block an SM, and was
// the slowest at every size measured, so there is none. A grid of only as many blocks as are
// resident, each listing the experts with rows, was slower at 2 rows a pass (46.4 -> 48.3 us at
// one token a rank of bench_hf_model's model, 151 -> 169 at 8; session 34) and not kept. Nor were
// blocks of 4 or 2 waves (session 38, call 3, one H200, the up projection with its SwiGLU and the
// down projection of bench_hf_model's model): 43.7 / 44.9 us against 44.5 at one token a rank, but
// 146 against 137 at 8 and 219 against 196 at 16 (DeepSeek-V3 at world 8, 16 tokens: 989 against
// 906); our guess, not measured, is that each block loads x's rows for fewer waves. Nor 6 blocks of
// 4 waves an SM (__launch_bounds__ to 80 registers, a few spilled): 45.1 at one token, slower at
// every size.
//
// With the SwiGLU (GroupedGemv::swiglu) a wave's 4 columns are 2 gate columns and their 2 up
// columns: the same loads and sums, and lane 0 stores silu(gate) * up for the 2, so that the up
// projection of transformers' experts is one kernel, not three (the projection, the activation on
// a strided half, the product: 2 launches and about 7 us a layer at one token a rank on H200).
#include "experts/grouped_gemv.h"

#include "ep/token_vectors.cuh"
#include "moe_a2a/platform/launch.h"

namespace moe_a2a {
namespace {

inline constexpr int kGemvThreads = 256;
inline constexpr int kGemvWaves = kGemvThreads / kWaveSize;
inline constexpr int kColsPerWave = 4;
inline constexpr int kColsPerBlock = kGemvWaves * kColsPerWave;

template <TokenType kType>
MOE_A2A_DEVICE MOE_A2A_INLINE void store_element(void* y, int64_t i, float v) {
  if constexpr (kType == TokenType::kFloat32) {
    static_cast<float*>(y)[i] = v;
  } else {
    static_cast<uint16_t*>(y)[i] = from_float<kType>(v);
  }
}

// The SwiGLU of one gate and one up sum, rounded as the unfused chain rounds: the projection's
// output (gate, up) in the element type, silu(gate) in it (torch's x / (1 + exp(-x)) in fp32), then
// their product. So the fused op gives the bits of act_fn(gate) * up over grouped_gemv's output.
template <TokenType kType>
MOE_A2A_DEVICE MOE_A2A_INLINE float swiglu(float gate, float up) {
  const float g = rounded<kType>(gate);
  return rounded<kType>(g / (1.0f + expf(-g))) * rounded<kType>(up);
}

// One pass over the weights for rows first .. first + rows_here - 1 (rows_here <= kRows): a row
// past rows_here repeats the last valid one and its sums are neither reduced nor stored. col0: the
// wave's first column of y. kSwiglu: the wave's columns are gate columns col0, col0 + 1 and their
// up columns (grouped_gemv_kernel), and it stores the two SwiGLU values.
template <TokenType kType, int kRows, bool kSwiglu>
MOE_A2A_DEVICE MOE_A2A_INLINE void gemv_pass(const GroupedGemv& g, const Vec16* const (&w_col)[kColsPerWave], int col0,
                                             int64_t first, int rows_here) {
  constexpr int kElems = kVecElems<kType>;
  constexpr int kBytes = kType == TokenType::kFloat32 ? 4 : 2;
  const int lane = lane_id();
  const int vecs = g.in / kElems;
  const Vec16* __restrict__ x_row[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t row = first + (r < rows_here ? r : rows_here - 1);
    x_row[r] = reinterpret_cast<const Vec16*>(static_cast<const char*>(g.x) + row * g.x_row_stride * kBytes);
  }
  float acc[kColsPerWave][kRows] = {};
  constexpr int kUnroll = kRows == 1 ? 4 : 2;
#pragma unroll kUnroll
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
  for (int r = 0; r < kRows; ++r) {
    if (r >= rows_here) break;  // the same for the whole wave
    if constexpr (kSwiglu) {
      const int y_cols = g.out / 2;
#pragma unroll
      for (int c = 0; c < kColsPerWave / 2; ++c) {
        const float gate = wave_sum(acc[c][r]), up = wave_sum(acc[c + kColsPerWave / 2][r]);
        if (lane == 0 && col0 + c < y_cols)
          store_element<kType>(g.y, (first + r) * y_cols + col0 + c, swiglu<kType>(gate, up));
      }
    } else {
#pragma unroll
      for (int c = 0; c < kColsPerWave; ++c) {
        const float sum = wave_sum(acc[c][r]);
        if (lane == 0 && col0 + c < g.out) store_element<kType>(g.y, (first + r) * g.out + col0 + c, sum);
      }
    }
  }
}

// kRows 1, 2 or 4: every pass takes up to kRows rows. kRows 0 (automatic): each pass takes the
// expert's remaining rows in the narrowest body that holds them (3 or more: 4; 2; 1).
// kSwiglu (GroupedGemv::swiglu): a wave owns kColsPerWave / 2 columns of y and reads their gate and
// up columns of w, the same kColsPerWave weight columns a pass as without it.
template <TokenType kType, int kRows, bool kSwiglu>
__global__ void __launch_bounds__(kGemvThreads) grouped_gemv_kernel(GroupedGemv g) {
  constexpr int kBytes = kType == TokenType::kFloat32 ? 4 : 2;
  constexpr int kYColsPerWave = kSwiglu ? kColsPerWave / 2 : kColsPerWave;
  const int e = blockIdx.y;
  const int count = g.counts[e];
  const int64_t first = g.offsets[e];
  if (count <= 0 || first < 0 || first + count > g.rows) return;
  const int y_cols = kSwiglu ? g.out / 2 : g.out;
  const int col0 = (blockIdx.x * kGemvWaves + wave_id()) * kYColsPerWave;  // of y
  if (col0 >= y_cols) return;  // no block barrier below: a wave may leave alone

  // A column past y's reads the last one again; its sums are dropped.
  const Vec16* w_col[kColsPerWave];
  const char* w_expert = static_cast<const char*>(g.w) + e * g.w_expert_stride * kBytes;
#pragma unroll
  for (int c = 0; c < kColsPerWave; ++c) {
    const int y_col = col0 + c % kYColsPerWave < y_cols ? col0 + c % kYColsPerWave : y_cols - 1;
    const int col = kSwiglu && c >= kYColsPerWave ? y_cols + y_col : y_col;  // up: the second half
    w_col[c] = reinterpret_cast<const Vec16*>(w_expert + col * g.w_out_stride * kBytes);
  }
  if constexpr (kRows > 0) {
    for (int r0 = 0; r0 < count; r0 += kRows) {
      gemv_pass<kType, kRows, kSwiglu>(g, w_col, col0, first + r0, count - r0 < kRows ? count - r0 : kRows);
    }
  } else {
    for (int r0 = 0; r0 < count;) {
      const int left = count - r0;
      if (left >= 3) {
        gemv_pass<kType, 4, kSwiglu>(g, w_col, col0, first + r0, left < 4 ? left : 4);
        r0 += 4;
      } else if (left == 2) {
        gemv_pass<kType, 2, kSwiglu>(g, w_col, col0, first + r0, 2);
        r0 += 2;
      } else {
        gemv_pass<kType, 1, kSwiglu>(g, w_col, col0, first + r0, 1);
        r0 += 1;
      }
    }
  }
}

// w contiguous along out (w[e] is [in, out], as x @ w[e] reads it). A block takes one expert and a
// slab of kSlabCols columns: kLanesPerVector lanes cover a slab's row, a 16-byte vector each, and
// the block's lane groups split `in`, kElems consecutive rows each a step, so that a lane reads x
// as one 16-byte vector a row a step and kElems weight vectors (kElems x kElems products a row).
// Every weight byte is loaded once a pass. The partial sums meet by butterfly within a wave, then
// through shared memory across waves, in a fixed order. A lane that read x one element a step
// (four loads a weight vector at 4 rows) was slower than torch._grouped_mm from 2 rows an expert
// on; with x in vectors 4 rows a pass was the fastest from 0.125 rows an expert on, and within 6%
// of 1 a pass below that, so the automatic mode takes 4 (bench_experts.py, session 35, call 2).
inline constexpr int kLanesPerVector = 8;
inline constexpr int kInGroups = kGemvThreads / kLanesPerVector;

template <TokenType kType, int kRows>
__global__ void __launch_bounds__(kGemvThreads) grouped_gemv_out_contiguous_kernel(GroupedGemv g) {
  constexpr int kElems = kVecElems<kType>;
  constexpr int kBytes = kType == TokenType::kFloat32 ? 4 : 2;
  constexpr int kSlabCols = kLanesPerVector * kElems;
  __shared__ float wave_sums[kGemvWaves][kRows][kSlabCols];
  const int e = blockIdx.y;
  const int count = g.counts[e];
  const int64_t first = g.offsets[e];
  if (count <= 0 || first < 0 || first + count > g.rows) return;  // the whole block alike
  const int slab0 = blockIdx.x * kSlabCols;
  const int vec = lane_id() % kLanesPerVector;
  // out is a multiple of kElems: a lane's vector is all inside the columns or all past them
  const bool in_columns = slab0 + vec * kElems < g.out;
  const char* w_lane = static_cast<const char*>(g.w) + (e * g.w_expert_stride + slab0 + vec * kElems) * kBytes;
  const int64_t w_row_bytes = g.w_in_stride * kBytes;
  const int in_first = static_cast<int>(threadIdx.x) / kLanesPerVector * kElems;

  for (int r0 = 0; r0 < count; r0 += kRows) {
    const int rows_here = count - r0 < kRows ? count - r0 : kRows;
    const char* x_row[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = first + r0 + (r < rows_here ? r : rows_here - 1);
      x_row[r] = static_cast<const char*>(g.x) + row * g.x_row_stride * kBytes;
    }
    float acc[kRows][8] = {};
    if (in_columns) {
#pragma unroll 2
      for (int i = in_first; i < g.in; i += kInGroups * kElems) {
        Vec16 wv[kElems];
#pragma unroll
        for (int j = 0; j < kElems; ++j) wv[j] = *reinterpret_cast<const Vec16*>(w_lane + (i + j) * w_row_bytes);
        float xf[kRows][8];
#pragma unroll
        for (int r = 0; r < kRows; ++r)
          unpack_vec<kType>(*reinterpret_cast<const Vec16*>(x_row[r] + i * kBytes), xf[r]);
#pragma unroll
        for (int j = 0; j < kElems; ++j) {
          float wf[8];
          unpack_vec<kType>(wv[j], wf);
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
#pragma unroll
            for (int c = 0; c < kElems; ++c) acc[r][c] = fmaf(wf[c], xf[r][j], acc[r][c]);
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int c = 0; c < kElems; ++c) {
        for (int m = kLanesPerVector; m < kWaveSize; m *= 2) acc[r][c] += wave_shfl_xor(acc[r][c], m);
        if (lane_id() < kLanesPerVector) wave_sums[wave_id()][r][vec * kElems + c] = acc[r][c];
      }
    }
    __syncthreads();
    for (int o = static_cast<int>(threadIdx.x); o < kRows * kSlabCols; o += kGemvThreads) {
      const int r = o / kSlabCols, c = o % kSlabCols;
      if (r < rows_here && slab0 + c < g.out) {
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < kGemvWaves; ++w) sum += wave_sums[w][r][c];
        store_element<kType>(g.y, (first + r0 + r) * g.out + slab0 + c, sum);
      }
    }
    __syncthreads();  // wave_sums again, for the next pass
  }
}

template <TokenType kType, int kRows>
void launch_instance(const GroupedGemv& g, hipStream_t stream) {
  const dim3 block(kGemvThreads);
  if (g.w_in_stride == 1) {  // a block reads kColsPerBlock columns of w, with or without the SwiGLU
    const dim3 grid((g.out + kColsPerBlock - 1) / kColsPerBlock, g.experts);
    if (g.swiglu) return launch_kernel(grouped_gemv_kernel<kType, kRows, true>, grid, block, stream, false, g);
    return launch_kernel(grouped_gemv_kernel<kType, kRows, false>, grid, block, stream, false, g);
  }
  constexpr int kSlabCols = kLanesPerVector * kVecElems<kType>;
  const dim3 grid((g.out + kSlabCols - 1) / kSlabCols, g.experts);
  constexpr int kOutRows = kRows > 0 ? kRows : 4;  // automatic: 4 rows a pass (see the kernel)
  launch_kernel(grouped_gemv_out_contiguous_kernel<kType, kOutRows>, grid, block, stream, false, g);
}

template <TokenType kType>
void launch_typed(const GroupedGemv& g, int rows_per_pass, hipStream_t stream) {
  switch (rows_per_pass) {
    case 0:
      return launch_instance<kType, 0>(g, stream);
    case 1:
      return launch_instance<kType, 1>(g, stream);
    case 2:
      return launch_instance<kType, 2>(g, stream);
    case 4:
      return launch_instance<kType, 4>(g, stream);
  }
  MOE_A2A_CHECK(false, "grouped_gemv: rows_per_pass must be 0 (automatic), 1, 2 or 4, got ", rows_per_pass);
}

}  // namespace

void launch_grouped_gemv(const GroupedGemv& g, int rows_per_pass, hipStream_t stream) {
  MOE_A2A_CHECK(g.experts > 0 && g.out > 0 && g.in > 0, "grouped_gemv: empty shape");
  MOE_A2A_CHECK(g.experts <= kGemvMaxExperts, "grouped_gemv: at most ", kGemvMaxExperts, " experts, got ", g.experts);
  MOE_A2A_CHECK(g.w_in_stride == 1 || g.w_out_stride == 1, "grouped_gemv: w must be contiguous along in or out");
  MOE_A2A_CHECK(!g.swiglu || (g.w_in_stride == 1 && g.out % 2 == 0),
                "grouped_gemv: swiglu needs w contiguous along in and an even out, got out ", g.out);
  if (g.type == TokenType::kBFloat16) return launch_typed<TokenType::kBFloat16>(g, rows_per_pass, stream);
  if (g.type == TokenType::kFloat16) return launch_typed<TokenType::kFloat16>(g, rows_per_pass, stream);
  return launch_typed<TokenType::kFloat32>(g, rows_per_pass, stream);
}

}  // namespace moe_a2a
