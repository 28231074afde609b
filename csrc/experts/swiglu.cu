// The experts' SwiGLU, weighted or not, one kernel each way (swiglu.h). A block takes a row at a
// time (a row of no expert: zeros, nothing read), its threads a 16-byte vector each (a row of 2048
// bf16 values is one vector a thread of a 256-thread block): loads of gate and up (and, backward,
// of the gradient), the products in fp32, one store of each output vector. The backward sums each
// thread's grad_w products, then the wave's (butterfly), then the block's waves in ascending
// order: a fixed order.
#include "experts/swiglu.h"

#include "ep/token_vectors.cuh"
#include "moe_a2a/platform/launch.h"

namespace moe_a2a {
namespace {

inline constexpr int kSwigluThreads = 256;
inline constexpr int kSwigluWaves = kSwigluThreads / kWaveSize;
inline constexpr int64_t kSwigluMaxBlocks = 1 << 16;  // rows beyond: the blocks loop

// expf, not __expf, and silu as x / (1 + exp(-x)): torch's formula and function, so that the
// unweighted h rounds as torch's does.
MOE_A2A_DEVICE MOE_A2A_INLINE float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
MOE_A2A_DEVICE MOE_A2A_INLINE float silu(float x) { return x / (1.0f + expf(-x)); }

// Whether row r is an expert's: the last expert that starts at or before it (binary search over
// the ascending offsets; an empty expert that shares its start with the next is passed over) holds
// it. Every thread of the block alike: the same loads, from L1.
MOE_A2A_DEVICE MOE_A2A_INLINE bool expert_row(const SwigluArgs& a, int64_t r) {
  if (a.expert_offsets == nullptr) return true;
  int lo = 0, hi = a.experts;  // the first expert that starts past r is in [lo, hi]
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (a.expert_offsets[mid] <= r) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  const int e = lo - 1;
  return e >= 0 && r - a.expert_offsets[e] < a.expert_counts[e];
}

MOE_A2A_DEVICE MOE_A2A_INLINE void zero_row(void* rows, int64_t r, int vecs) {
  Vec16* row = static_cast<Vec16*>(rows) + r * vecs;
  for (int v = threadIdx.x; v < vecs; v += blockDim.x) row[v] = Vec16{0u, 0u, 0u, 0u};
}

template <TokenType kType>
__global__ void __launch_bounds__(kSwigluThreads) swiglu_kernel(SwigluArgs a) {
  constexpr int n = kVecElems<kType>;
  const int vecs = a.cols / n;
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    if (!expert_row(a, r)) {
      zero_row(a.h, r, vecs);
      continue;
    }
    const Vec16* gate = static_cast<const Vec16*>(a.gate) + r * vecs;
    const Vec16* up = static_cast<const Vec16*>(a.up) + r * vecs;
    Vec16* h = static_cast<Vec16*>(a.h) + r * vecs;
    const float w = a.row_weights != nullptr ? a.row_weights[r] : 1.0f;
    for (int v = threadIdx.x; v < vecs; v += blockDim.x) {
      float g[8], u[8], out[8];
      unpack_vec<kType>(gate[v], g);
      unpack_vec<kType>(up[v], u);
#pragma unroll
      for (int i = 0; i < n; ++i) {  // torch's roundings: silu(g), the product, then (weighted) times w
        out[i] = rounded<kType>(rounded<kType>(silu(g[i])) * u[i]) * w;
      }
      h[v] = pack_vec<kType>(out);
    }
  }
}

template <TokenType kType>
__global__ void __launch_bounds__(kSwigluThreads) swiglu_backward_kernel(SwigluArgs a) {
  constexpr int n = kVecElems<kType>;
  __shared__ float wave_dw[kSwigluWaves];
  const int vecs = a.cols / n;
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    if (!expert_row(a, r)) {
      zero_row(a.grad_gate, r, vecs);
      zero_row(a.grad_up, r, vecs);
      if (a.grad_weights != nullptr && threadIdx.x == 0) a.grad_weights[r] = 0.0f;
      continue;
    }
    const Vec16* gate = static_cast<const Vec16*>(a.gate) + r * vecs;
    const Vec16* up = static_cast<const Vec16*>(a.up) + r * vecs;
    const Vec16* grad_h = static_cast<const Vec16*>(a.grad_h) + r * vecs;
    Vec16* grad_gate = static_cast<Vec16*>(a.grad_gate) + r * vecs;
    Vec16* grad_up = static_cast<Vec16*>(a.grad_up) + r * vecs;
    const float w = a.row_weights != nullptr ? a.row_weights[r] : 1.0f;
    float dw = 0.0f;
    for (int v = threadIdx.x; v < vecs; v += blockDim.x) {
      float g[8], u[8], dh[8], dg[8], du[8];
      unpack_vec<kType>(gate[v], g);
      unpack_vec<kType>(up[v], u);
      unpack_vec<kType>(grad_h[v], dh);
#pragma unroll
      for (int i = 0; i < n; ++i) {
        const float s = sigmoid(g[i]);
        const float dh_silu = dh[i] * (g[i] * s);
        dg[i] = dh[i] * u[i] * w * (s * (1.0f + g[i] * (1.0f - s)));  // silu'(g) = s (1 + g (1 - s))
        du[i] = dh_silu * w;
        dw = fmaf(dh_silu, u[i], dw);
      }
      grad_gate[v] = pack_vec<kType>(dg);
      grad_up[v] = pack_vec<kType>(du);
    }
    if (a.grad_weights == nullptr) continue;  // the same for every thread of the block
    dw = wave_sum(dw);
    if (lane_id() == 0) wave_dw[wave_id()] = dw;
    __syncthreads();
    if (threadIdx.x == 0) {
      float sum = 0.0f;
      for (int i = 0; i < kSwigluWaves; ++i) sum += wave_dw[i];
      a.grad_weights[r] = sum;
    }
    __syncthreads();  // wave_dw is the next row's
  }
}

void check_swiglu(const SwigluArgs& a) {
  const int n = a.type == TokenType::kFloat32 ? 4 : 8;
  MOE_A2A_CHECK(a.cols > 0 && a.cols % n == 0, "swiglu: the columns (", a.cols, ") must be a positive multiple of ", n);
  MOE_A2A_CHECK(a.rows >= 0, "swiglu: negative rows");
}

dim3 swiglu_grid(const SwigluArgs& a) {
  return dim3(static_cast<unsigned>(a.rows < kSwigluMaxBlocks ? a.rows : kSwigluMaxBlocks));
}

}  // namespace

void launch_swiglu(const SwigluArgs& a, hipStream_t stream) {
  check_swiglu(a);
  if (a.rows == 0) return;
  MOE_A2A_DISPATCH_TOKEN_TYPE(
      a.type, kType, launch_kernel(swiglu_kernel<kType>, swiglu_grid(a), dim3(kSwigluThreads), stream, false, a));
}

void launch_swiglu_backward(const SwigluArgs& a, hipStream_t stream) {
  check_swiglu(a);
  if (a.rows == 0) return;
  MOE_A2A_DISPATCH_TOKEN_TYPE(
      a.type, kType,
      launch_kernel(swiglu_backward_kernel<kType>, swiglu_grid(a), dim3(kSwigluThreads), stream, false, a));
}

}  // namespace moe_a2a
