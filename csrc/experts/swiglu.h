// The experts' SwiGLU activation as one kernel each way, with the router weights applied to it
// where the experts apply them (AllToAll's weights_at_experts; docs/design/weights-at-experts.md):
//   forward   h[r, f] = silu(gate[r, f]) * up[r, f] * w[r]                    (w = 1 without weights)
//   backward  grad_gate = grad_h * up * w * silu'(gate), grad_up = grad_h * silu(gate) * w,
//             grad_w[r] = sum over f of grad_h * silu(gate) * up
// in fp32, each output rounded once to the element type; grad_w is summed in a fixed order (the
// same bits for the same inputs). In torch ops the weighted activation took a pass over [rows, F]
// per product and per gradient, fp32 temporaries among them: more than the backward of combine
// saved by not reading y (session 51, 2 x H200). Rows at or past *rows_used (packed: the last
// expert's end, expert_offsets[E]) are written as zeros and not read: about half of a packed
// buffer at its default capacity.
// Raw pointers only (no torch): the ops in csrc/bindings/experts_ops.cpp check the tensors.
#pragma once

#include <cstdint>

#include "moe_a2a/ep/kernels.h"
#include "moe_a2a/platform/runtime.h"

namespace moe_a2a {

struct SwigluArgs {
  const void* gate;          // [rows, cols], contiguous
  const void* up;            // [rows, cols], contiguous
  const float* row_weights;  // [rows]; nullptr: 1
  const int32_t* rows_used;  // one device int; nullptr: every row
  const void* grad_h;        // backward: [rows, cols], contiguous
  void* h;                   // forward: [rows, cols]
  void* grad_gate;           // backward: [rows, cols]
  void* grad_up;             // backward: [rows, cols]
  float* grad_weights;       // backward: [rows]; nullptr: not asked
  int64_t rows;
  int32_t cols;    // a multiple of a 16-byte vector's elements (8; 4 for fp32)
  TokenType type;  // of gate, up, h and the gradients alike
};

void launch_swiglu(const SwigluArgs& a, hipStream_t stream);
void launch_swiglu_backward(const SwigluArgs& a, hipStream_t stream);

}  // namespace moe_a2a
