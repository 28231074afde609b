// The experts' SwiGLU activation as one kernel each way, with the router weights applied to it
// where the experts apply them (AllToAll's weights_at_experts; docs/design/weights-at-experts.md):
//   forward   h[r, f] = silu(gate[r, f]) * up[r, f] * w[r]                    (w = 1 without weights)
//   backward  grad_gate = grad_h * up * w * silu'(gate), grad_up = grad_h * silu(gate) * w,
//             grad_w[r] = sum over f of grad_h * silu(gate) * up
// The forward rounds as torch's chain F.silu(gate) * up (then * w, in fp32) rounds, each step to
// the element type, so that the unweighted h is the unfused one's (within an ulp); the backward computes
// in fp32 and rounds each gradient once, grad_w summed in a fixed order (the same bits for the
// same inputs). In torch ops the weighted activation took a pass over [rows, F] per product and
// per gradient, fp32 temporaries among them, and a mask of the rows of no expert: more than the
// backward of combine saved by not reading y (session 51, 2 x H200). Given the experts' rows
// (dispatch's expert_offsets and expert_num_tokens), the rows of no expert are written as zeros
// and not read (their values, and their weights, are undefined): about half of a packed buffer at
// its default capacity.
// Raw pointers only (no torch): the ops in csrc/bindings/swiglu_ops.cpp check the tensors.
#pragma once

#include <cstdint>

#include "moe_a2a/ep/kernels.h"
#include "moe_a2a/platform/runtime.h"

namespace moe_a2a {

struct SwigluArgs {
  const void* gate;          // [rows, cols], contiguous
  const void* up;            // [rows, cols], contiguous
  const float* row_weights;  // [rows]; nullptr: 1
  // The experts' rows: expert e owns rows expert_offsets[e] .. + expert_counts[e] - 1 (offsets
  // ascending); the other rows are zeros. nullptr: every row is an expert's.
  const int32_t* expert_offsets;  // [experts + 1] (the first `experts` are read)
  const int32_t* expert_counts;   // [experts]
  int32_t experts;
  const void* grad_h;   // backward: [rows, cols], contiguous
  void* h;              // forward: [rows, cols]
  void* grad_gate;      // backward: [rows, cols]
  void* grad_up;        // backward: [rows, cols]
  float* grad_weights;  // backward: [rows]; nullptr: not asked
  int64_t rows;
  int32_t cols;    // a multiple of a 16-byte vector's elements (8; 4 for fp32)
  TokenType type;  // of gate, up, h and the gradients alike
};

void launch_swiglu(const SwigluArgs& a, hipStream_t stream);
void launch_swiglu_backward(const SwigluArgs& a, hipStream_t stream);

}  // namespace moe_a2a
