// The experts' SwiGLU, weighted or not, as torch ops (csrc/experts/swiglu.h):
//   swiglu(gate [rows, F], up [rows, F], row_weights [rows] float32?, expert_offsets [E + 1] int32?,
//          expert_num_tokens [E] int32?) -> h [rows, F]
//   swiglu_backward(grad_h, gate, up, row_weights?, expert_offsets?, expert_num_tokens?, weight_grads)
//       -> (grad_gate, grad_up, grad_weights: [rows] float32 if weight_grads, else [0])
// gate, up and grad_h: bfloat16, float16 or float32, alike, contiguous, F a multiple of a 16-byte
// vector's elements. Given the experts' rows (both or neither), the rows of no expert come out as
// zeros. Every output is a fresh tensor of torch's allocator on the current stream. Autograd:
// moe_a2a.swiglu (Python) pairs the two.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "experts/swiglu.h"
#include "registry.h"

namespace moe_a2a {
namespace {

void check_rows(const at::Tensor& t, const char* name, const at::Tensor& gate) {
  MOE_A2A_TORCH_CHECK(t.sizes() == gate.sizes() && t.scalar_type() == gate.scalar_type(), "moe_a2a.swiglu: ", name,
                      " must be ", c10::toString(gate.scalar_type()), " ", shape_str(gate.sizes()), " as gate, got ",
                      c10::toString(t.scalar_type()), " ", shape_str(t.sizes()));
  MOE_A2A_TORCH_CHECK(t.is_contiguous() && reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0,
                      "moe_a2a.swiglu: ", name, " must be contiguous and start on 16 bytes");
  MOE_A2A_TORCH_CHECK(t.device() == gate.device(), "moe_a2a.swiglu: ", name, " is on ", t.device().str(), ", gate on ",
                      gate.device().str());
}

void check_expert_rows(const std::optional<at::Tensor>& offsets, const std::optional<at::Tensor>& counts,
                       const at::Tensor& gate) {
  MOE_A2A_TORCH_CHECK(offsets.has_value() == counts.has_value(),
                      "moe_a2a.swiglu: expert_offsets and expert_num_tokens go together");
  if (!offsets.has_value()) return;
  const int64_t experts = counts->numel();
  MOE_A2A_TORCH_CHECK(counts->scalar_type() == at::kInt && counts->dim() == 1 && counts->is_contiguous() &&
                          offsets->scalar_type() == at::kInt && offsets->dim() == 1 && offsets->is_contiguous() &&
                          offsets->numel() >= experts && experts > 0,
                      "moe_a2a.swiglu: expert_num_tokens must be int32 [E > 0] and expert_offsets int32 [E + 1], "
                      "contiguous, got ",
                      c10::toString(counts->scalar_type()), " ", shape_str(counts->sizes()), " and ",
                      c10::toString(offsets->scalar_type()), " ", shape_str(offsets->sizes()));
  MOE_A2A_TORCH_CHECK(counts->device() == gate.device() && offsets->device() == gate.device(),
                      "moe_a2a.swiglu: the experts' rows must be on ", gate.device().str());
}

SwigluArgs swiglu_args(const at::Tensor& gate, const at::Tensor& up, const std::optional<at::Tensor>& row_weights,
                       const std::optional<at::Tensor>& offsets, const std::optional<at::Tensor>& counts) {
  const at::ScalarType t = gate.scalar_type();
  MOE_A2A_TORCH_CHECK(t == at::kBFloat16 || t == at::kHalf || t == at::kFloat,
                      "moe_a2a.swiglu: gate must be bfloat16, float16 or float32, got ", c10::toString(t));
  MOE_A2A_TORCH_CHECK(gate.dim() == 2, "moe_a2a.swiglu: gate must be [rows, F], got ", shape_str(gate.sizes()));
  check_rows(gate, "gate", gate);
  check_rows(up, "up", gate);
  const int vec = t == at::kFloat ? 4 : 8;
  MOE_A2A_TORCH_CHECK(gate.size(1) > 0 && gate.size(1) % vec == 0, "moe_a2a.swiglu: F (", gate.size(1),
                      ") must be a positive multiple of ", vec, " for ", c10::toString(t));
  SwigluArgs a{};
  a.gate = gate.data_ptr();
  a.up = up.data_ptr();
  a.rows = gate.size(0);
  a.cols = static_cast<int32_t>(gate.size(1));
  a.type = token_type(t);
  if (row_weights.has_value()) {
    const at::Tensor& w = *row_weights;
    MOE_A2A_TORCH_CHECK(w.scalar_type() == at::kFloat && w.dim() == 1 && w.size(0) == gate.size(0) &&
                            w.is_contiguous() && w.device() == gate.device(),
                        "moe_a2a.swiglu: row_weights must be float32 [", gate.size(0), "] on ", gate.device().str(),
                        ", contiguous, got ", c10::toString(w.scalar_type()), " ", shape_str(w.sizes()));
    a.row_weights = w.data_ptr<float>();
  }
  check_expert_rows(offsets, counts, gate);
  if (offsets.has_value()) {
    a.expert_offsets = offsets->data_ptr<int32_t>();
    a.expert_counts = counts->data_ptr<int32_t>();
    a.experts = static_cast<int32_t>(counts->numel());
  }
  return a;
}

at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up, const std::optional<at::Tensor>& row_weights,
                  const std::optional<at::Tensor>& offsets, const std::optional<at::Tensor>& counts) {
  SwigluArgs a = swiglu_args(gate, up, row_weights, offsets, counts);
  const c10::cuda::CUDAGuard guard(gate.device());
  at::Tensor h = at::empty_like(gate);
  a.h = h.data_ptr();
  launch_swiglu(a, at::cuda::getCurrentCUDAStream(gate.get_device()).stream());
  return h;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> swiglu_backward(const at::Tensor& grad_h, const at::Tensor& gate,
                                                               const at::Tensor& up,
                                                               const std::optional<at::Tensor>& row_weights,
                                                               const std::optional<at::Tensor>& offsets,
                                                               const std::optional<at::Tensor>& counts,
                                                               bool weight_grads) {
  SwigluArgs a = swiglu_args(gate, up, row_weights, offsets, counts);
  check_rows(grad_h, "grad_h", gate);
  const c10::cuda::CUDAGuard guard(gate.device());
  at::Tensor grad_gate = at::empty_like(gate), grad_up = at::empty_like(up);
  at::Tensor grad_weights = at::empty({weight_grads ? gate.size(0) : 0}, gate.options().dtype(at::kFloat));
  a.grad_h = grad_h.data_ptr();
  a.grad_gate = grad_gate.data_ptr();
  a.grad_up = grad_up.data_ptr();
  a.grad_weights = weight_grads ? grad_weights.data_ptr<float>() : nullptr;
  launch_swiglu_backward(a, at::cuda::getCurrentCUDAStream(gate.get_device()).stream());
  return {grad_gate, grad_up, grad_weights};
}

at::Tensor swiglu_meta(const at::Tensor& gate, const at::Tensor&, const std::optional<at::Tensor>&,
                       const std::optional<at::Tensor>&, const std::optional<at::Tensor>&) {
  return at::empty_like(gate);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> swiglu_backward_meta(
    const at::Tensor&, const at::Tensor& gate, const at::Tensor& up, const std::optional<at::Tensor>&,
    const std::optional<at::Tensor>&, const std::optional<at::Tensor>&, bool weight_grads) {
  return {at::empty_like(gate), at::empty_like(up),
          at::empty({weight_grads ? gate.size(0) : 0}, gate.options().dtype(at::kFloat))};
}

}  // namespace
}  // namespace moe_a2a

TORCH_LIBRARY_FRAGMENT(moe_a2a, m) {
  m.def(
      "swiglu(Tensor gate, Tensor up, Tensor? row_weights=None, Tensor? expert_offsets=None, "
      "Tensor? expert_num_tokens=None) -> Tensor");
  m.def(
      "swiglu_backward(Tensor grad_h, Tensor gate, Tensor up, Tensor? row_weights=None, "
      "Tensor? expert_offsets=None, Tensor? expert_num_tokens=None, bool weight_grads=False) -> "
      "(Tensor, Tensor, Tensor)");
}
TORCH_LIBRARY_IMPL(moe_a2a, CUDA, m) {
  m.impl("swiglu", &moe_a2a::swiglu);
  m.impl("swiglu_backward", &moe_a2a::swiglu_backward);
}
TORCH_LIBRARY_IMPL(moe_a2a, Meta, m) {
  m.impl("swiglu", &moe_a2a::swiglu_meta);
  m.impl("swiglu_backward", &moe_a2a::swiglu_backward_meta);
}
