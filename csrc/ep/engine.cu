#include "engine.h"

#include <cstdio>
#include <cstring>

#include "ep_device.cuh"
#include "moe_a2a/platform/device.h"

namespace moe_a2a {
namespace {

// What may come next in each phase, for the out-of-order message.
const char* next_calls(int phase) {
  static const char* const kNext[] = {
      "dispatch_send, or a backward round (combine_send of a dispatch's gradient, output_grad_send)",
      "dispatch_recv", "combine_send", "combine_recv", "output_grad_recv", "weight_grad_recv"};
  return kNext[phase];
}

}  // namespace

EpEngine::EpEngine(const EpConfig& cfg, TokenType token_type, std::shared_ptr<SymmetricHeap> heap, size_t ep_offset,
                   double timeout_s)
    : heap_(std::move(heap)) {
  const std::string why = validate(cfg);
  MOE_A2A_CHECK(why.empty(), why);
  MOE_A2A_CHECK(heap_ && heap_->is_open(), "EpEngine needs a symmetric heap whose peers are open");
  MOE_A2A_CHECK(heap_->rank() == cfg.rank && heap_->world() == cfg.world,
                "heap is rank ", heap_->rank(), " of ", heap_->world(), ", config says rank ", cfg.rank
                               , " of ", cfg.world);
  MOE_A2A_CHECK(timeout_s > 0, "timeout must be positive, got ", timeout_s);
  ctx_.cfg = cfg;
  ctx_.heap_layout = cfg.heap_layout();
  ctx_.ws_layout = cfg.workspace_layout();
  MOE_A2A_CHECK(ep_offset + ctx_.heap_layout.total <= heap_->bytes(),
                "all-to-all region [", ep_offset, ", +", ctx_.heap_layout.total, ") exceeds the heap of "
                                     , heap_->bytes(), " bytes");
  ctx_.heap = heap_->view();
  ctx_.ep_offset = ep_offset;
  ctx_.token_type = token_type;

  const int device = heap_->device();
  MOE_A2A_GPU_CHECK(hipSetDevice(device));
  int sms = 0;
  MOE_A2A_GPU_CHECK(hipDeviceGetAttribute(&sms, hipDeviceAttributeMultiprocessorCount, device));
  // One block per compute unit: enough to saturate the links, and (on MI300X) a multiple of
  // the 8 XCDs. dispatch-send needs ceil(max_tokens / blocks) <= 256.
  ctx_.num_blocks = sms;
  while ((cfg.max_tokens + ctx_.num_blocks - 1) / ctx_.num_blocks > 256) ctx_.num_blocks *= 2;
  ctx_.timeout_ticks = static_cast<uint64_t>(timeout_s * wall_clock_rate_hz(device));

  MOE_A2A_GPU_CHECK(hipMalloc(reinterpret_cast<void**>(&ctx_.workspace), ctx_.ws_layout.total));
  MOE_A2A_GPU_CHECK(hipMemset(ctx_.workspace, 0, ctx_.ws_layout.total));
  MOE_A2A_GPU_CHECK(hipHostMalloc(reinterpret_cast<void**>(&error_host_), sizeof(ErrorRecord), hipHostMallocMapped));
  std::memset(error_host_, 0, sizeof(ErrorRecord));
  MOE_A2A_GPU_CHECK(hipHostGetDevicePointer(reinterpret_cast<void**>(&ctx_.error), error_host_, 0));
  MOE_A2A_GPU_CHECK(hipDeviceSynchronize());
}

EpEngine::~EpEngine() {
  try {
    close();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moe_a2a: closing EpEngine failed: %s\n", e.what());
  }
}

void EpEngine::close() {
  if (closed_) return;
  closed_ = true;
  MOE_A2A_GPU_CHECK(hipSetDevice(heap_->device()));
  MOE_A2A_GPU_CHECK(hipDeviceSynchronize());
#if defined(MOE_A2A_ENABLE_PROFILER)
  profiler_.reset();
  ctx_.profiler = ProfilerView{};
#endif
  if (ctx_.workspace != nullptr) MOE_A2A_GPU_CHECK(hipFree(ctx_.workspace));
  if (error_host_ != nullptr) MOE_A2A_GPU_CHECK(hipHostFree(error_host_));
  ctx_.workspace = nullptr;
  error_host_ = nullptr;
  heap_.reset();
}

#if defined(MOE_A2A_ENABLE_PROFILER)
void EpEngine::enable_profiler(uint32_t capacity_per_track, size_t mailbox_offset) {
  MOE_A2A_CHECK(!closed_, "enable_profiler called after close()");
  MOE_A2A_CHECK(profiler_ == nullptr, "the profiler of this all-to-all is already on");
  MOE_A2A_CHECK(phase_ == Phase::kIdle, "enable_profiler must be called between rounds");
  profiler_ = std::make_unique<ProfilerSession>(ctx_.heap, heap_->device(), mailbox_offset, ctx_.num_blocks,
                                                kWavesPerBlock, capacity_per_track, ctx_.timeout_ticks);
  ctx_.profiler = profiler_->view();
}

ProfileDump EpEngine::collect_profile(hipStream_t stream) {
  MOE_A2A_CHECK(!closed_, "collect_profile called after close()");
  MOE_A2A_CHECK(profiler_ != nullptr, "this all-to-all was created without profile=True");
  return profiler_->collect(stream);
}

void EpEngine::reset_profile(hipStream_t stream) {
  MOE_A2A_CHECK(!closed_ && profiler_ != nullptr, "this all-to-all is not profiling");
  profiler_->reset(stream);
}
#endif

void EpEngine::expect(Phase phase, const char* call) {
  // A call that starts a round first raises what the previous rounds reported.
  if (phase == Phase::kIdle) check_errors();
  MOE_A2A_CHECK(!closed_, call, " called after close()");
  MOE_A2A_CHECK(failed_.empty(), "all-to-all is unusable after an earlier error: ", failed_);
  MOE_A2A_CHECK(phase_ == phase, call, " called out of order: the next call must be ",
                next_calls(static_cast<int>(phase_)),
                " (each dispatch must be combined before the next dispatch, and each backward round finished "
                "before the next round)");
}

void EpEngine::dispatch_send(const DispatchSendArgs& args, hipStream_t stream) {
  expect(Phase::kIdle, "dispatch_send");
  launch_dispatch_send(ctx_, args, stream);
  phase_ = Phase::kDispatchSent;
}

void EpEngine::dispatch_recv(const DispatchRecvArgs& args, hipStream_t stream) {
  expect(Phase::kDispatchSent, "dispatch_recv");
  launch_dispatch_recv(ctx_, args, stream);
  phase_ = Phase::kDispatchReceived;
}

void EpEngine::combine_send(const CombineSendArgs& args, hipStream_t stream) {
  // With await_ready it is a round of its own: the backward of a dispatch.
  if (args.await_ready) expect(Phase::kIdle, "combine_send (backward of dispatch)");
  else expect(Phase::kDispatchReceived, "combine_send");
  launch_combine_send(ctx_, args, stream);
  phase_ = Phase::kCombineSent;
}

void EpEngine::combine_recv(const CombineRecvArgs& args, hipStream_t stream) {
  expect(Phase::kCombineSent, "combine_recv");
  launch_combine_recv(ctx_, args, stream);
  phase_ = Phase::kIdle;
}

void EpEngine::output_grad_send(const OutputGradSendArgs& args, hipStream_t stream) {
  expect(Phase::kIdle, "output_grad_send");
  launch_output_grad_send(ctx_, args, stream);
  phase_ = Phase::kOutputGradSent;
}

void EpEngine::output_grad_recv(const OutputGradRecvArgs& args, hipStream_t stream) {
  expect(Phase::kOutputGradSent, "output_grad_recv");
  launch_output_grad_recv(ctx_, args, stream);
  phase_ = Phase::kOutputGradReceived;
}

void EpEngine::weight_grad_recv(const WeightGradRecvArgs& args, hipStream_t stream) {
  expect(Phase::kOutputGradReceived, "weight_grad_recv");
  launch_weight_grad_recv(ctx_, args, stream);
  phase_ = Phase::kIdle;
}

std::string EpEngine::describe(const ErrorRecord& e) const {
  const int me = ctx_.cfg.rank;
  const auto code = static_cast<ErrorCode>(e.code);
  switch (code) {
    case ErrorCode::kDispatchTimeout:
    case ErrorCode::kCombineTimeout: {
      static const char* const kWaiter[kNumKernels] = {
          "dispatch-send", "dispatch-recv", "combine-send (backward of dispatch)", "combine-recv",
          "output-grad-send", "output-grad-recv (backward of combine)", "weight-grad-recv (backward of combine)"};
      const bool dispatch = code == ErrorCode::kDispatchTimeout;
      const char* waiter = e.detail >= 0 && e.detail < kNumKernels ? kWaiter[e.detail] : "?";
      return cat("rank ", me, " timed out in ", waiter, " waiting for rank ", e.peer,
                 "'s ", dispatch ? "dispatch" : "combine", " flag (flag index ", e.index, ", waited for epoch ",
                 flag_epoch(e.expected), ", last saw epoch ", flag_epoch(e.seen),
                 "): that rank did not take part in the call, or is far behind");
    }
    case ErrorCode::kBadExpertId:
      return cat("rank ", me, ": topk_idx holds expert id ", e.detail, " at token ", e.index, ", outside [0, ",
                 e.expected, "); that (token, k) was not sent");
    case ErrorCode::kCapacityOverflow:
      if (ctx_.cfg.packed()) {
        return cat("rank ", me, ": received ", e.seen, " (token, expert) rows in total but max_recv_tokens is ",
                   e.expected, "; the extra rows were dropped. Raise max_recv_tokens");
      }
      return cat("rank ", me, ": local expert ", e.detail, " received at least ", e.seen,
                 " tokens but its capacity (max_recv_tokens_per_expert) is ", e.expected,
                 "; the extra tokens were dropped. Raise max_recv_tokens_per_expert");
    case ErrorCode::kBadRoute:
      return cat("rank ", me, ": the route given to a backward or combine call is not one a dispatch of this "
                 "all-to-all wrote (modified Dispatched tensors?); nothing was sent for it");
    case ErrorCode::kPeerError:
      return cat("rank ", me, ": rank ", e.peer, " reported an error in this call (see that rank's exception)");
    default:
      return cat("rank ", me, ": unknown device error code ", e.code);
  }
}

void EpEngine::check_errors() {
  if (closed_ || error_host_ == nullptr) return;
  MOE_A2A_CHECK(failed_.empty(), "all-to-all is unusable after an earlier error: ", failed_);
  volatile ErrorRecord* live = error_host_;
  const uint32_t code = live->code;
  if (code == 0) return;
  ErrorRecord e;
  std::memcpy(&e, const_cast<ErrorRecord*>(error_host_), sizeof(e));
  const std::string what = describe(e);
  const auto c = static_cast<ErrorCode>(code);
  if (c == ErrorCode::kDispatchTimeout || c == ErrorCode::kCombineTimeout) {
    failed_ = what;  // raised now, and as "unusable" by every later call
  }
  std::memset(error_host_, 0, sizeof(ErrorRecord));
  MOE_A2A_CHECK(false, what);
}

}  // namespace moe_a2a
