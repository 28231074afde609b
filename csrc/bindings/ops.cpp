// The torch ops. Schemas mark the state token as mutated (Tensor(a!)) so that torch.compile
// keeps the calls of one all-to-all in order and never drops one as dead code; the kernels'
// real state lives in the engine. Meta implementations give output shapes without running
// anything. Every input is checked here, at the boundary, with the argument's name.
//
// A dispatch returns what the experts read and its route as tensors (DispatchOutputs below:
// dest_mask on the token side; src_tokens, recv_token, recv_pos on the expert side); combine
// and the two backward rounds take the route back, so a backward pass replays exactly the
// placement of its forward pass (see ep/kernels.h).
// dispatch, combine and dispatch_backward are one kernel launch each; the split ops
// (dispatch_send / dispatch_recv, combine_send / combine_recv) launch one half each.
//
// Every tensor an op returns is an allocation of its own, shared with no input and no other
// output: torch.compile requires that of a custom op whose schema declares no alias (its first
// compiled call checks the storages; torch 2.11 warns, 2.12 raises).
#include <ATen/Context.h>
#include <ATen/EmptyTensor.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/detail/CUDAHooksInterface.h>
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

void check_tensor(const at::Tensor& t, const char* name, const EpEngine& e, at::IntArrayRef shape,
                  at::ScalarType dtype) {
  check_device(t, name, e);
  MOE_A2A_TORCH_CHECK(t.sizes() == shape, "moe_a2a: ", name, " must be ", shape_str(shape), ", got ",
                      shape_str(t.sizes()));
  MOE_A2A_TORCH_CHECK(t.scalar_type() == dtype, "moe_a2a: ", name, " must be ", c10::toString(dtype), ", got ",
                      c10::toString(t.scalar_type()));
}

hipStream_t current_stream(const EpEngine& e) { return at::cuda::getCurrentCUDAStream(e.heap().device()).stream(); }

// Makes a dispatch's outputs, each an allocation of its own. On the GPU they come straight from
// torch's caching allocator (the current device, which the ops set to the engine's, and the
// current stream: what at::empty gives, record_stream and CUDA graph pools included) without a
// trip through the dispatcher per tensor, of which a dispatch would make ten; on Meta (shapes
// only) from at::empty.
class NewOutputs {
 public:
  explicit NewOutputs(at::Device device) : device_(device) {
    if (device.is_meta()) return;
    at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);  // as at::empty does first (a no-op by now)
    allocator_ = at::detail::getCUDAHooks().getCUDADeviceAllocator();
  }

  at::Tensor operator()(at::IntArrayRef shape, at::ScalarType dtype) const {
    if (allocator_ == nullptr) return at::empty(shape, at::TensorOptions().device(device_).dtype(dtype));
    return at::detail::empty_generic(shape, allocator_, c10::DispatchKeySet(c10::DispatchKey::CUDA), dtype,
                                     std::nullopt);
  }

 private:
  at::Device device_;
  c10::Allocator* allocator_ = nullptr;  // null: Meta
};

// ---- shapes of what a dispatch delivers (rows: padded [E_local, capacity], packed [capacity])
std::vector<int64_t> rows_shape(const EpConfig& c) {
  if (c.packed()) return {c.expert_capacity};
  return {c.experts_per_rank(), c.expert_capacity};
}
std::vector<int64_t> with(std::vector<int64_t> shape, int64_t last) {
  shape.push_back(last);
  return shape;
}
std::vector<int64_t> expert_x_shape(const EpConfig& c) { return with(rows_shape(c), c.hidden); }
// fp8 rows: one scale per block of channels; otherwise no scales (an empty last dimension).
std::vector<int64_t> expert_x_scale_shape(const EpConfig& c) {
  return with(rows_shape(c), c.fp8_rows() ? c.scale_blocks() : 0);
}
at::ScalarType fp8_dtype(const EpConfig& c) {
  return c.fp8 == Fp8Format::kE4M3Fnuz ? at::kFloat8_e4m3fnuz : at::kFloat8_e4m3fn;
}
// The element type of expert_x: fp8, or the token type.
at::ScalarType expert_x_dtype(int64_t id, const EpConfig& c) { return c.fp8_rows() ? fp8_dtype(c) : engine_dtype(id); }
int64_t route_rows(const EpConfig& c) { return static_cast<int64_t>(c.rows_per_rank()); }

// ---- the routes, checked where they come back
SendRoute send_route(const at::Tensor& dest_mask, const EpEngine& e) {
  check_device(dest_mask, "dest_mask", e);
  MOE_A2A_TORCH_CHECK(
      dest_mask.dim() == 1 && dest_mask.size(0) <= e.config().max_tokens && dest_mask.scalar_type() == at::kInt,
      "moe_a2a: dest_mask must be int32 [num_tokens <= ", e.config().max_tokens, "], got ",
      c10::toString(dest_mask.scalar_type()), " ", shape_str(dest_mask.sizes()));
  return SendRoute{dest_mask.data_ptr<int32_t>(), static_cast<int32_t>(dest_mask.size(0))};
}

RecvRoute recv_route(const at::Tensor& src_tokens, const at::Tensor& token, const at::Tensor& pos, const EpEngine& e) {
  const EpConfig& c = e.config();
  check_tensor(src_tokens, "src_tokens", e, {c.world}, at::kInt);
  check_tensor(token, "recv_token", e, {route_rows(c)}, at::kInt);
  check_tensor(pos, "recv_pos", e, {route_rows(c), c.topk}, at::kInt);
  return RecvRoute{src_tokens.data_ptr<int32_t>(), token.data_ptr<int32_t>(), pos.data_ptr<int32_t>()};
}

// ---- dispatch: the send half's inputs, the receive half's outputs
// Checks x (and x_scale), topk_idx, topk_weights and fills the send half of `args` but its
// route (dest_mask: point_send_route).
void dispatch_inputs(int64_t id, const EpEngine& e, const at::Tensor& x, const std::optional<at::Tensor>& x_scale,
                     const at::Tensor& topk_idx, const at::Tensor& topk_weights, DispatchArgs& args) {
  const EpConfig& c = e.config();
  check_device(x, "x", e);
  check_device(topk_idx, "topk_idx", e);
  check_device(topk_weights, "topk_weights", e);
  MOE_A2A_TORCH_CHECK(x.dim() == 2 && x.size(1) == c.hidden, "moe_a2a: x must be [num_tokens, ", c.hidden, "], got ",
                      shape_str(x.sizes()));
  const int64_t t = x.size(0);
  if (x_scale.has_value()) {  // quantized by the caller
    MOE_A2A_TORCH_CHECK(c.fp8_rows(), "moe_a2a: x_scale is for an all-to-all with fp8 dispatch (dispatch_dtype=)");
    MOE_A2A_TORCH_CHECK(x.scalar_type() == fp8_dtype(c), "moe_a2a: x with x_scale must be ",
                        c10::toString(fp8_dtype(c)), ", got ", c10::toString(x.scalar_type()));
    check_tensor(*x_scale, "x_scale", e, {t, c.scale_blocks()}, at::kFloat);
    args.x_scale = x_scale->data_ptr<float>();
  } else {
    MOE_A2A_TORCH_CHECK(x.scalar_type() == engine_dtype(id), "moe_a2a: x must be ", c10::toString(engine_dtype(id)),
                        ", got ", c10::toString(x.scalar_type()),
                        c.fp8_rows() ? " (or fp8 bytes with their x_scale)" : "");
    args.x_scale = nullptr;
  }
  MOE_A2A_TORCH_CHECK(t <= c.max_tokens, "moe_a2a: x has ", t, " tokens, more than max_num_tokens = ", c.max_tokens);
  MOE_A2A_TORCH_CHECK(topk_idx.dim() == 2 && topk_idx.size(0) == t && topk_idx.size(1) == c.topk,
                      "moe_a2a: topk_idx must be [", t, ", ", c.topk, "], got ", shape_str(topk_idx.sizes()));
  MOE_A2A_TORCH_CHECK(topk_idx.scalar_type() == at::kInt || topk_idx.scalar_type() == at::kLong,
                      "moe_a2a: topk_idx must be int32 or int64, got ", c10::toString(topk_idx.scalar_type()));
  MOE_A2A_TORCH_CHECK(topk_weights.dim() == 2 && topk_weights.size(0) == t && topk_weights.size(1) == c.topk,
                      "moe_a2a: topk_weights must be [", t, ", ", c.topk, "], got ", shape_str(topk_weights.sizes()));
  MOE_A2A_TORCH_CHECK(topk_weights.scalar_type() == at::kFloat, "moe_a2a: topk_weights must be float32, got ",
                      c10::toString(topk_weights.scalar_type()));
  args.x = x.data_ptr();
  args.topk_idx = topk_idx.data_ptr();
  args.topk_idx_is_int64 = topk_idx.scalar_type() == at::kLong;
  args.topk_weights = topk_weights.data_ptr<float>();
}
// dest_mask: [num_tokens] int32, one word per token of x (the token side of the route).
void point_send_route(DispatchArgs& args, const at::Tensor& dest_mask) {
  args.route = SendRoute{dest_mask.data_ptr<int32_t>(), static_cast<int32_t>(dest_mask.size(0))};
}

// What a dispatch returns, by name. The ops return it as a tuple in this order (the schemas
// below); python/moe_a2a/_rounds.py reads it by the same names, checked against
// dispatch_output_names() when the module loads, so a field is added here and there only.
struct DispatchOutputs {
  // what the experts read
  at::Tensor expert_x, expert_x_scale, expert_num_tokens, expert_offsets, expert_meta, expert_weights;
  // the route, expert side
  at::Tensor src_tokens, recv_token, recv_pos;

  using Tuple = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                           at::Tensor, at::Tensor>;
  Tuple as_tuple() && {
    return {std::move(expert_x),       std::move(expert_x_scale), std::move(expert_num_tokens),
            std::move(expert_offsets), std::move(expert_meta),    std::move(expert_weights),
            std::move(src_tokens),     std::move(recv_token),     std::move(recv_pos)};
  }
  // The fused dispatch adds the token side of the route.
  using FusedTuple = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                                at::Tensor, at::Tensor, at::Tensor>;
  FusedTuple with_dest_mask(at::Tensor dest_mask) && {
    return std::tuple_cat(std::move(*this).as_tuple(), std::make_tuple(std::move(dest_mask)));
  }

  static DispatchOutputs empty(int64_t id, at::Device device) { return empty_with_dest_mask(id, device, -1).first; }
  // Each output an allocation of its own (NewOutputs), so that none aliases another (see the
  // top of this file), and so that the route, which autograd keeps until the backward, keeps
  // neither expert_x nor the experts' metadata alive. With `tokens` >= 0 (the fused op), also
  // dest_mask, [tokens] int32 (undefined otherwise).
  static std::pair<DispatchOutputs, at::Tensor> empty_with_dest_mask(int64_t id, at::Device device, int64_t tokens) {
    const EpConfig c = config_by_id(id);
    const NewOutputs make(device);
    DispatchOutputs out;
    out.expert_x = make(expert_x_shape(c), expert_x_dtype(id, c));
    out.expert_x_scale = make(expert_x_scale_shape(c), at::kFloat);  // no elements without fp8
    out.expert_num_tokens = make({c.experts_per_rank()}, at::kInt);
    out.expert_offsets = make({c.experts_per_rank() + 1}, at::kInt);
    out.expert_meta = make(with(rows_shape(c), 3), at::kInt);
    out.expert_weights = make(rows_shape(c), at::kFloat);
    out.src_tokens = make({c.world}, at::kInt);
    out.recv_token = make({route_rows(c)}, at::kInt);
    out.recv_pos = make({route_rows(c), c.topk}, at::kInt);
    at::Tensor dest_mask = tokens >= 0 ? make({tokens}, at::kInt) : at::Tensor();
    return {std::move(out), std::move(dest_mask)};
  }

  void point(DispatchArgs& args) {
    args.expert_x = expert_x.data_ptr();
    args.expert_x_scale = expert_x_scale.numel() > 0 ? expert_x_scale.data_ptr<float>() : nullptr;
    args.expert_num_tokens = expert_num_tokens.data_ptr<int32_t>();
    args.expert_offsets = expert_offsets.data_ptr<int32_t>();
    args.expert_meta = expert_meta.data_ptr<int32_t>();
    args.expert_weights = expert_weights.data_ptr<float>();
    args.recv_route =
        RecvRoute{src_tokens.data_ptr<int32_t>(), recv_token.data_ptr<int32_t>(), recv_pos.data_ptr<int32_t>()};
  }
};
const char* const kDispatchOutputNames[] = {"expert_x",       "expert_x_scale", "expert_num_tokens",
                                            "expert_offsets", "expert_meta",    "expert_weights",
                                            "src_tokens",     "recv_token",     "recv_pos"};
static_assert(sizeof(kDispatchOutputNames) / sizeof(kDispatchOutputNames[0]) ==
                  std::tuple_size<DispatchOutputs::Tuple>::value,
              "one name per output");

// ---- forward round
DispatchOutputs::FusedTuple dispatch(int64_t id, at::Tensor& state, const at::Tensor& x,
                                     const std::optional<at::Tensor>& x_scale, const at::Tensor& topk_idx,
                                     const at::Tensor& topk_weights) {
  (void)state;
  EpEngine& e = engine_by_id(id);
  const c10::cuda::CUDAGuard guard(e.heap().device());
  DispatchArgs args{};
  dispatch_inputs(id, e, x, x_scale, topk_idx, topk_weights, args);
  auto [out, dest_mask] = DispatchOutputs::empty_with_dest_mask(id, x.device(), x.size(0));
  out.point(args);
  point_send_route(args, dest_mask);
  e.dispatch(args, current_stream(e));
  return std::move(out).with_dest_mask(std::move(dest_mask));
}

at::Tensor dispatch_send(int64_t id, at::Tensor& state, const at::Tensor& x, const std::optional<at::Tensor>& x_scale,
                         const at::Tensor& topk_idx, const at::Tensor& topk_weights) {
  (void)state;
  EpEngine& e = engine_by_id(id);
  const c10::cuda::CUDAGuard guard(e.heap().device());
  DispatchArgs args{};
  dispatch_inputs(id, e, x, x_scale, topk_idx, topk_weights, args);
  at::Tensor dest_mask = at::empty({x.size(0)}, x.options().dtype(at::kInt));
  point_send_route(args, dest_mask);
  e.dispatch_send(args, current_stream(e));
  return dest_mask;
}

DispatchOutputs::Tuple dispatch_recv(int64_t id, at::Tensor& state) {
  (void)state;
  EpEngine& e = engine_by_id(id);
  const c10::cuda::CUDAGuard guard(e.heap().device());
  DispatchOutputs out = DispatchOutputs::empty(id, at::Device(at::kCUDA, e.heap().device()));
  DispatchArgs args{};
  out.point(args);
  e.dispatch_recv(args, current_stream(e));
  return std::move(out).as_tuple();
}

void check_expert_rows(const at::Tensor& t, const char* name, int64_t id, const EpEngine& e) {
  check_tensor(t, name, e, expert_x_shape(e.config()), engine_dtype(id));
}

// The send half of a combine: the experts' output (weighted, or not: a dispatch's gradient, or the
// weights at the experts) and the route it goes back along.
CombineArgs combine_inputs(int64_t id, const EpEngine& e, const at::Tensor& expert_y, const char* name,
                           const std::optional<at::Tensor>& expert_weights, const at::Tensor& src_tokens,
                           const at::Tensor& recv_token, const at::Tensor& recv_pos) {
  check_expert_rows(expert_y, name, id, e);
  CombineArgs args{};
  args.expert_y = expert_y.data_ptr();
  if (expert_weights.has_value()) {
    check_tensor(*expert_weights, "expert_weights", e, rows_shape(e.config()), at::kFloat);
    args.expert_weights = expert_weights->data_ptr<float>();
  }
  args.recv_route = recv_route(src_tokens, recv_token, recv_pos, e);
  return args;
}

// The receive half: out [num_tokens, hidden] for the token side's route.
at::Tensor combine_output(int64_t id, const EpEngine& e, const at::Tensor& dest_mask, CombineArgs& args) {
  args.route = send_route(dest_mask, e);
  at::Tensor out = at::empty({args.route.num_tokens, e.config().hidden},
                             at::TensorOptions().device(at::kCUDA, e.heap().device()).dtype(engine_dtype(id)));
  args.out = out.data_ptr();
  return out;
}

at::Tensor combine(int64_t id, at::Tensor& state, const at::Tensor& expert_y,
                   const std::optional<at::Tensor>& expert_weights, const at::Tensor& src_tokens,
                   const at::Tensor& recv_token, const at::Tensor& recv_pos, const at::Tensor& dest_mask) {
  (void)state;
  EpEngine& e = engine_by_id(id);
  const c10::cuda::CUDAGuard guard(e.heap().device());
  CombineArgs args = combine_inputs(id, e, expert_y, "expert_y", expert_weights, src_tokens, recv_token, recv_pos);
  at::Tensor out = combine_output(id, e, dest_mask, args);
  e.combine(args, current_stream(e));
  return out;
}

void combine_send(int64_t id, at::Tensor& state, const at::Tensor& expert_y,
                  const std::optional<at::Tensor>& expert_weights, const at::Tensor& src_tokens,
                  const at::Tensor& recv_token, const at::Tensor& recv_pos) {
  (void)state;
  EpEngine& e = engine_by_id(id);
  const c10::cuda::CUDAGuard guard(e.heap().device());
  e.combine_send(combine_inputs(id, e, expert_y, "expert_y", expert_weights, src_tokens, recv_token, recv_pos),
                 current_stream(e));
}

at::Tensor combine_recv(int64_t id, at::Tensor& state, const at::Tensor& dest_mask) {
  (void)state;
  EpEngine& e = engine_by_id(id);
  const c10::cuda::CUDAGuard guard(e.heap().device());
  CombineArgs args{};
  at::Tensor out = combine_output(id, e, dest_mask, args);
  e.combine_recv(args, current_stream(e));
  return out;
}

// ---- backward of dispatch: an unweighted combine of the rows' gradients, one launch; returns (grad x,
// grad topk_weights), two allocations. With the weights at the experts (weights_at_experts, the same on
// every rank) each used pair's weight gradient goes back too: grad_expert_weights [..rows..] float32
// (None: 0 for every pair); the second is [num_tokens, topk] if weight_grads, else empty ([0, topk]).
std::tuple<at::Tensor, at::Tensor> dispatch_backward(int64_t id, at::Tensor& state, const at::Tensor& grad_expert_x,
                                                     const std::optional<at::Tensor>& grad_expert_weights,
                                                     const at::Tensor& src_tokens, const at::Tensor& recv_token,
                                                     const at::Tensor& recv_pos, const at::Tensor& dest_mask,
                                                     bool weights_at_experts, bool weight_grads) {
  (void)state;
  EpEngine& e = engine_by_id(id);
  const c10::cuda::CUDAGuard guard(e.heap().device());
  MOE_A2A_CHECK(weights_at_experts || (!grad_expert_weights.has_value() && !weight_grads),
                "dispatch_backward: grad_expert_weights and weight_grads need weights_at_experts");
  CombineArgs args =
      combine_inputs(id, e, grad_expert_x, "grad_expert_x", std::nullopt, src_tokens, recv_token, recv_pos);
  at::Tensor grad_x = combine_output(id, e, dest_mask, args);
  at::Tensor grad_topk_weights =
      at::empty({weight_grads ? args.route.num_tokens : 0, e.config().topk}, dest_mask.options().dtype(at::kFloat));
  args.sends_weight_grads = weights_at_experts;
  if (grad_expert_weights.has_value()) {
    check_tensor(*grad_expert_weights, "grad_expert_weights", e, rows_shape(e.config()), at::kFloat);
    args.pair_weight_grads = grad_expert_weights->data_ptr<float>();
  }
  args.grad_topk_weights = weight_grads ? grad_topk_weights.data_ptr<float>() : nullptr;
  e.dispatch_backward(args, current_stream(e));
  return {grad_x, grad_topk_weights};
}

// ---- backward of combine: one launch; returns (grad expert_y, grad topk_weights), two allocations
// (autograd may keep the weights' gradient as a leaf's .grad, which must not hold grad_expert_y).
// Without weight_grads the second is empty ([0, topk]) and the expert ranks skip this rank's dot
// products (kernels.h, CombineBackwardArgs).
std::tuple<at::Tensor, at::Tensor> combine_backward(int64_t id, at::Tensor& state, const at::Tensor& grad_out,
                                                    const at::Tensor& expert_y,
                                                    const std::optional<at::Tensor>& expert_weights,
                                                    const at::Tensor& expert_offsets,
                                                    const at::Tensor& expert_num_tokens, const at::Tensor& src_tokens,
                                                    const at::Tensor& recv_token, const at::Tensor& recv_pos,
                                                    const at::Tensor& dest_mask, bool weight_grads) {
  (void)state;
  EpEngine& e = engine_by_id(id);
  const EpConfig& c = e.config();
  const c10::cuda::CUDAGuard guard(e.heap().device());
  const SendRoute route = send_route(dest_mask, e);
  check_tensor(grad_out, "grad_out", e, {route.num_tokens, c.hidden}, engine_dtype(id));
  check_expert_rows(expert_y, "expert_y", id, e);
  if (expert_weights.has_value()) check_tensor(*expert_weights, "expert_weights", e, rows_shape(c), at::kFloat);
  check_tensor(expert_offsets, "expert_offsets", e, {c.experts_per_rank() + 1}, at::kInt);
  check_tensor(expert_num_tokens, "expert_num_tokens", e, {c.experts_per_rank()}, at::kInt);
  at::Tensor grad_expert_y = at::empty_like(expert_y);  // the kernel writes every row
  at::Tensor grad_topk_weights =
      at::empty({weight_grads ? route.num_tokens : 0, c.topk}, dest_mask.options().dtype(at::kFloat));
  CombineBackwardArgs args{};
  args.grad_out = grad_out.data_ptr();
  args.grad_topk_weights = weight_grads ? grad_topk_weights.data_ptr<float>() : nullptr;
  args.route = route;
  args.expert_y = expert_y.data_ptr();
  args.expert_weights = expert_weights.has_value() ? expert_weights->data_ptr<float>() : nullptr;  // none: 1
  args.expert_offsets = expert_offsets.data_ptr<int32_t>();
  args.expert_num_tokens = expert_num_tokens.data_ptr<int32_t>();
  args.grad_expert_y = grad_expert_y.data_ptr();
  args.recv_route = recv_route(src_tokens, recv_token, recv_pos, e);
  e.combine_backward(args, current_stream(e));
  return {grad_expert_y, grad_topk_weights};
}

// ---- Meta: shapes only, so torch.compile can trace the ops without running them.
at::Tensor token_rows_meta(int64_t id, const at::Tensor& dest_mask) {
  return at::empty({dest_mask.size(0), config_by_id(id).hidden}, dest_mask.options().dtype(engine_dtype(id)));
}
DispatchOutputs::FusedTuple dispatch_meta(int64_t id, at::Tensor&, const at::Tensor& x,
                                          const std::optional<at::Tensor>&, const at::Tensor&, const at::Tensor&) {
  auto [out, dest_mask] = DispatchOutputs::empty_with_dest_mask(id, at::Device(at::kMeta), x.size(0));
  return std::move(out).with_dest_mask(std::move(dest_mask));
}
at::Tensor dispatch_send_meta(int64_t, at::Tensor&, const at::Tensor& x, const std::optional<at::Tensor>&,
                              const at::Tensor&, const at::Tensor&) {
  return at::empty({x.size(0)}, x.options().dtype(at::kInt));
}
DispatchOutputs::Tuple dispatch_recv_meta(int64_t id, at::Tensor&) {
  return DispatchOutputs::empty(id, at::Device(at::kMeta)).as_tuple();
}
at::Tensor combine_meta(int64_t id, at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, const at::Tensor&,
                        const at::Tensor&, const at::Tensor&, const at::Tensor& dest_mask) {
  return token_rows_meta(id, dest_mask);
}
void combine_send_meta(int64_t, at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, const at::Tensor&,
                       const at::Tensor&, const at::Tensor&) {}
at::Tensor combine_recv_meta(int64_t id, at::Tensor&, const at::Tensor& dest_mask) {
  return token_rows_meta(id, dest_mask);
}
std::tuple<at::Tensor, at::Tensor> dispatch_backward_meta(int64_t id, at::Tensor&, const at::Tensor&,
                                                          const std::optional<at::Tensor>&, const at::Tensor&,
                                                          const at::Tensor&, const at::Tensor&,
                                                          const at::Tensor& dest_mask, bool, bool weight_grads) {
  return {token_rows_meta(id, dest_mask), at::empty({weight_grads ? dest_mask.size(0) : 0, config_by_id(id).topk},
                                                    dest_mask.options().dtype(at::kFloat))};
}
std::tuple<at::Tensor, at::Tensor> combine_backward_meta(int64_t id, at::Tensor&, const at::Tensor&,
                                                         const at::Tensor& expert_y, const std::optional<at::Tensor>&,
                                                         const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                         const at::Tensor&, const at::Tensor&,
                                                         const at::Tensor& dest_mask, bool weight_grads) {
  return {at::empty_like(expert_y), at::empty({weight_grads ? dest_mask.size(0) : 0, config_by_id(id).topk},
                                              dest_mask.options().dtype(at::kFloat))};
}

}  // namespace

std::vector<std::string> dispatch_output_names() {
  return std::vector<std::string>(std::begin(kDispatchOutputNames), std::end(kDispatchOutputNames));
}

}  // namespace moe_a2a

TORCH_LIBRARY(moe_a2a, m) {
  // forward round: fused (one launch each) or split (one launch per half)
  // dispatch returns DispatchOutputs (expert_x, expert_x_scale, expert_num_tokens, expert_offsets,
  // expert_meta, expert_weights, src_tokens, recv_token, recv_pos), then dest_mask; dispatch_recv
  // the same without dest_mask, which dispatch_send returned.
  m.def(
      "dispatch(int engine, Tensor(a!) state, Tensor x, Tensor? x_scale, Tensor topk_idx, Tensor topk_weights) -> "
      "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def(
      "dispatch_send(int engine, Tensor(a!) state, Tensor x, Tensor? x_scale, Tensor topk_idx, Tensor topk_weights) "
      "-> Tensor");
  m.def(
      "dispatch_recv(int engine, Tensor(a!) state) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, "
      "Tensor, Tensor)");
  m.def(
      "combine(int engine, Tensor(a!) state, Tensor expert_y, Tensor? expert_weights, Tensor src_tokens, "
      "Tensor recv_token, Tensor recv_pos, Tensor dest_mask) -> Tensor");
  m.def(
      "combine_send(int engine, Tensor(a!) state, Tensor expert_y, Tensor? expert_weights, Tensor src_tokens, "
      "Tensor recv_token, Tensor recv_pos) -> ()");
  m.def("combine_recv(int engine, Tensor(a!) state, Tensor dest_mask) -> Tensor");
  // backward of dispatch: one launch; returns (grad x, grad topk_weights: [0, topk] without weight_grads)
  m.def(
      "dispatch_backward(int engine, Tensor(a!) state, Tensor grad_expert_x, Tensor? grad_expert_weights, "
      "Tensor src_tokens, Tensor recv_token, Tensor recv_pos, Tensor dest_mask, bool weights_at_experts=False, "
      "bool weight_grads=False) -> (Tensor, Tensor)");
  // backward of combine: one launch; returns (grad expert_y, grad topk_weights: [0, topk] without
  // weight_grads)
  m.def(
      "combine_backward(int engine, Tensor(a!) state, Tensor grad_out, Tensor expert_y, Tensor? expert_weights, "
      "Tensor expert_offsets, Tensor expert_num_tokens, Tensor src_tokens, Tensor recv_token, Tensor recv_pos, "
      "Tensor dest_mask, bool weight_grads=True) -> (Tensor, Tensor)");
}

#define MOE_A2A_IMPL_ALL(m, suffix)                                 \
  m.impl("dispatch", &moe_a2a::dispatch##suffix);                   \
  m.impl("dispatch_send", &moe_a2a::dispatch_send##suffix);         \
  m.impl("dispatch_recv", &moe_a2a::dispatch_recv##suffix);         \
  m.impl("combine", &moe_a2a::combine##suffix);                     \
  m.impl("combine_send", &moe_a2a::combine_send##suffix);           \
  m.impl("combine_recv", &moe_a2a::combine_recv##suffix);           \
  m.impl("dispatch_backward", &moe_a2a::dispatch_backward##suffix); \
  m.impl("combine_backward", &moe_a2a::combine_backward##suffix)

TORCH_LIBRARY_IMPL(moe_a2a, CUDA, m) { MOE_A2A_IMPL_ALL(m, ); }
TORCH_LIBRARY_IMPL(moe_a2a, Meta, m) { MOE_A2A_IMPL_ALL(m, _meta); }
