// The torch ops. Schemas mark the state token as mutated (Tensor(a!)) so that torch.compile
// keeps the four calls of one all-to-all in order and never drops one as dead code; the
// kernels' real state lives in the engine. Meta implementations give output shapes without
// running anything. Every input is checked here, at the boundary, with the argument's name.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "registry.h"

namespace moe_a2a {
namespace {

void check_device(const at::Tensor& t, const char* name, const EpEngine& e) {
  MOE_A2A_TORCH_CHECK(t.is_cuda(), "moe_a2a: ", name, " must be a GPU tensor, got ", t.device().str());
  MOE_A2A_TORCH_CHECK(t.get_device() == e.heap().device(), "moe_a2a: ", name, " is on device ", t.get_device(),
              " but this all-to-all lives on device ", e.heap().device());
  MOE_A2A_TORCH_CHECK(t.is_contiguous(), "moe_a2a: ", name, " must be contiguous");
}

hipStream_t current_stream(const EpEngine& e) { return at::cuda::getCurrentCUDAStream(e.heap().device()).stream(); }

void dispatch_send(int64_t id, at::Tensor& state, const at::Tensor& x, const at::Tensor& topk_idx,
                   const at::Tensor& topk_weights) {
  (void)state;
  EpEngine& e = engine_by_id(id);
  const EpConfig& c = e.config();
  const c10::cuda::CUDAGuard guard(e.heap().device());
  check_device(x, "x", e);
  check_device(topk_idx, "topk_idx", e);
  check_device(topk_weights, "topk_weights", e);
  MOE_A2A_TORCH_CHECK(x.dim() == 2 && x.size(1) == c.hidden, "moe_a2a: x must be [num_tokens, ", c.hidden, "], got ",
              shape_str(x.sizes()));
  MOE_A2A_TORCH_CHECK(x.scalar_type() == engine_dtype(id), "moe_a2a: x must be ", c10::toString(engine_dtype(id)), ", got ",
              c10::toString(x.scalar_type()));
  const int64_t t = x.size(0);
  MOE_A2A_TORCH_CHECK(t <= c.max_tokens, "moe_a2a: x has ", t, " tokens, more than max_num_tokens = ", c.max_tokens);
  MOE_A2A_TORCH_CHECK(topk_idx.dim() == 2 && topk_idx.size(0) == t && topk_idx.size(1) == c.topk,
              "moe_a2a: topk_idx must be [", t, ", ", c.topk, "], got ", shape_str(topk_idx.sizes()));
  MOE_A2A_TORCH_CHECK(topk_idx.scalar_type() == at::kInt || topk_idx.scalar_type() == at::kLong,
              "moe_a2a: topk_idx must be int32 or int64, got ", c10::toString(topk_idx.scalar_type()));
  MOE_A2A_TORCH_CHECK(topk_weights.dim() == 2 && topk_weights.size(0) == t && topk_weights.size(1) == c.topk,
              "moe_a2a: topk_weights must be [", t, ", ", c.topk, "], got ", shape_str(topk_weights.sizes()));
  MOE_A2A_TORCH_CHECK(topk_weights.scalar_type() == at::kFloat, "moe_a2a: topk_weights must be float32, got ",
              c10::toString(topk_weights.scalar_type()));
  e.dispatch_send(DispatchSendArgs{x.data_ptr(), topk_idx.data_ptr(), topk_idx.scalar_type() == at::kLong,
                                   topk_weights.data_ptr<float>(), static_cast<int32_t>(t)},
                  current_stream(e));
}

std::vector<int64_t> expert_x_shape(const EpConfig& c) {
  return {c.experts_per_rank(), c.expert_capacity, c.hidden};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> make_dispatch_outputs(int64_t id, at::Device device) {
  const EpConfig& c = engine_by_id(id).config();
  const auto opts = at::TensorOptions().device(device);
  return {at::empty(expert_x_shape(c), opts.dtype(engine_dtype(id))),
          at::empty({c.experts_per_rank()}, opts.dtype(at::kInt)),
          at::empty({c.experts_per_rank(), c.expert_capacity, 3}, opts.dtype(at::kInt)),
          at::empty({c.experts_per_rank(), c.expert_capacity}, opts.dtype(at::kFloat))};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> dispatch_recv(int64_t id, at::Tensor& state) {
  (void)state;
  EpEngine& e = engine_by_id(id);
  const c10::cuda::CUDAGuard guard(e.heap().device());
  auto out = make_dispatch_outputs(id, at::Device(at::kCUDA, e.heap().device()));
  e.dispatch_recv(DispatchRecvArgs{std::get<0>(out).data_ptr(), std::get<1>(out).data_ptr<int32_t>(),
                                   std::get<2>(out).data_ptr<int32_t>(), std::get<3>(out).data_ptr<float>()},
                  current_stream(e));
  return out;
}

void combine_send(int64_t id, at::Tensor& state, const at::Tensor& expert_y) {
  (void)state;
  EpEngine& e = engine_by_id(id);
  const c10::cuda::CUDAGuard guard(e.heap().device());
  check_device(expert_y, "expert_y", e);
  MOE_A2A_TORCH_CHECK(expert_y.sizes() == at::IntArrayRef(expert_x_shape(e.config())), "moe_a2a: expert_y must be ",
              shape_str(expert_x_shape(e.config())), " like expert_x, got ", shape_str(expert_y.sizes()));
  MOE_A2A_TORCH_CHECK(expert_y.scalar_type() == engine_dtype(id), "moe_a2a: expert_y must be ", c10::toString(engine_dtype(id)), ", got ",
              c10::toString(expert_y.scalar_type()));
  e.combine_send(CombineSendArgs{expert_y.data_ptr()}, current_stream(e));
}

at::Tensor combine_recv(int64_t id, at::Tensor& state, int64_t num_tokens) {
  (void)state;
  EpEngine& e = engine_by_id(id);
  const c10::cuda::CUDAGuard guard(e.heap().device());
  MOE_A2A_TORCH_CHECK(num_tokens == e.num_tokens(), "moe_a2a: combine_recv num_tokens = ", num_tokens,
              " but the matching dispatch had ", e.num_tokens(), " tokens");
  at::Tensor out = at::empty({num_tokens, e.config().hidden},
                             at::TensorOptions().device(at::kCUDA, e.heap().device()).dtype(engine_dtype(id)));
  e.combine_recv(out.data_ptr(), current_stream(e));
  return out;
}

// ---- Meta: shapes only, so torch.compile can trace the ops without running them.
void dispatch_send_meta(int64_t, at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&) {}
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> dispatch_recv_meta(int64_t id, at::Tensor&) {
  return make_dispatch_outputs(id, at::Device(at::kMeta));
}
void combine_send_meta(int64_t, at::Tensor&, const at::Tensor&) {}
at::Tensor combine_recv_meta(int64_t id, at::Tensor&, int64_t num_tokens) {
  return at::empty({num_tokens, engine_by_id(id).config().hidden},
                   at::TensorOptions().device(at::kMeta).dtype(engine_dtype(id)));
}

}  // namespace
}  // namespace moe_a2a

TORCH_LIBRARY(moe_a2a, m) {
  m.def("dispatch_send(int engine, Tensor(a!) state, Tensor x, Tensor topk_idx, Tensor topk_weights) -> ()");
  m.def("dispatch_recv(int engine, Tensor(a!) state) -> (Tensor, Tensor, Tensor, Tensor)");
  m.def("combine_send(int engine, Tensor(a!) state, Tensor expert_y) -> ()");
  m.def("combine_recv(int engine, Tensor(a!) state, int num_tokens) -> Tensor");
}

TORCH_LIBRARY_IMPL(moe_a2a, CUDA, m) {
  m.impl("dispatch_send", &moe_a2a::dispatch_send);
  m.impl("dispatch_recv", &moe_a2a::dispatch_recv);
  m.impl("combine_send", &moe_a2a::combine_send);
  m.impl("combine_recv", &moe_a2a::combine_recv);
}

TORCH_LIBRARY_IMPL(moe_a2a, Meta, m) {
  m.impl("dispatch_send", &moe_a2a::dispatch_send_meta);
  m.impl("dispatch_recv", &moe_a2a::dispatch_recv_meta);
  m.impl("combine_send", &moe_a2a::combine_send_meta);
  m.impl("combine_recv", &moe_a2a::combine_recv_meta);
}
