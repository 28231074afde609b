// The local experts' linear layers at a few rows an expert: y = x @ W[e]^T for each expert e's
// rows, as decode steps feed them (a token or a few a rank, so one or two rows an expert). There
// a grouped GEMM's tiles are mostly empty and its time is far above what reading the active
// experts' weights once takes; this kernel streams each active expert's weights once a pass of
// of a few rows and does the dot products on the vector units, in fp32.
// Raw pointers only (no torch): the op in csrc/bindings/experts_ops.cpp checks the tensors.
#pragma once

#include <cstdint>

#include "moe_a2a/ep/kernels.h"
#include "moe_a2a/platform/runtime.h"

namespace moe_a2a {

// Expert e owns rows offsets[e] .. offsets[e] + counts[e] - 1 of x and of y (dispatch's packed
// layout: expert_offsets, expert_num_tokens). For each such row r and output column c:
//   y[r, c] = sum over i of x[r, i] * w[e, c, i]
// accumulated in fp32 and rounded once to the element type. Rows of no expert are not written.
// An expert whose rows fall outside [0, rows) is skipped: nothing is written outside y.
// With swiglu, w's out columns are gate then up (out / 2 each, transformers' concatenated gate_up)
// and y [rows, out / 2] is their SwiGLU, rounded as the unfused chain rounds it:
//   y[r, c] = round(silu(round(gate))) * round(up),  gate = sum(c), up = sum(out / 2 + c)
// (w contiguous along in only.) The experts' up projection then needs no second kernel for its
// activation, nor a round trip of its [rows, out] through memory.
struct GroupedGemv {
  const void* x;             // [rows, in], a row x_row_stride elements after the previous; in contiguous
  const void* w;             // [experts, out, in], contiguous along in (w_in_stride 1: nn.Linear's layout
                             // per expert) or along out (w_out_stride 1: the layout of x @ w[e])
  void* y;                   // [rows, out], contiguous
  const int32_t* offsets;    // [experts + 1] (only the first `experts` are read)
  const int32_t* counts;     // [experts]
  int64_t rows;              // rows of x and y
  int64_t x_row_stride;      // elements
  int64_t w_expert_stride;   // elements
  int64_t w_out_stride;      // elements between two output columns of one expert
  int64_t w_in_stride;       // elements between two input rows of one expert; one of the two is 1
  int32_t experts, in, out;  // in (and, contiguous along out, out): a multiple of a 16-byte vector's elements
  TokenType type;            // of x, w and y alike
  bool swiglu;               // y = SwiGLU(gate, up) [rows, out / 2] (above)
};

// The most experts one call takes: a block row of the grid each (65535 is CUDA's limit).
inline constexpr int kGemvMaxExperts = 65535;

// Enqueues the kernel on `stream`. rows_per_pass 0 is the automatic mode (grouped_gemv.cu: along
// in, each pass in the narrowest of 4, 2, 1 rows that holds the expert's remaining rows; along
// out, 4 a pass); 1, 2 or 4 fix the rows a pass. An expert with more rows than a pass takes
// several, each reading its weights again, mostly from L2.
void launch_grouped_gemv(const GroupedGemv& g, int rows_per_pass, hipStream_t stream);

}  // namespace moe_a2a
