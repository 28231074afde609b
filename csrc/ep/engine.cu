#include "engine.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "ep_device.cuh"
#include "moe_a2a/platform/device.h"
#include "moe_a2a/platform/device_guard.h"

namespace moe_a2a {
namespace {

// ---- the round table: every kind of round, once. Every rank runs the same rounds in the
// same order; the engine checks each call against this table, and the out-of-order message,
// the timeout messages (WaitSite in errors.h) and docs/design/protocol.md follow it.
enum Call : int {
  kDispatchSend,
  kDispatchRecv,
  kCombineSend,
  kCombineRecv,
  kDispatchBackwardSend,  // combine_send of a dispatch's gradient (dispatch_backward: when it waits)
  kCombineBackward,
  kNumCalls
};
constexpr const char* kCallName[] = {
    "dispatch_send", "dispatch_recv", "combine_send", "combine_recv", "dispatch_backward (send)", "combine_backward"};
static_assert(sizeof(kCallName) / sizeof(kCallName[0]) == kNumCalls, "one name per call");

struct RoundKind {
  const char* name;
  int steps[4];
  int num_steps;
};
enum RoundKindId : int { kForwardRound, kDispatchBackwardRound, kCombineBackwardRound };
constexpr RoundKind kRounds[] = {
    // indexed by RoundKindId
    {"forward", {kDispatchSend, kDispatchRecv, kCombineSend, kCombineRecv}, 4},
    {"backward of dispatch", {kDispatchBackwardSend, kCombineRecv}, 2},
    {"backward of combine", {kCombineBackward}, 1},
};
constexpr int kNumRounds = sizeof(kRounds) / sizeof(kRounds[0]);
static_assert(kRounds[kForwardRound].steps[0] == kDispatchSend &&
                  kRounds[kDispatchBackwardRound].steps[0] == kDispatchBackwardSend &&
                  kRounds[kCombineBackwardRound].steps[0] == kCombineBackward,
              "kRounds in RoundKindId's order");

// What may come next, for the out-of-order message.
std::string next_calls(int round, int step) {
  if (round >= 0) return kCallName[kRounds[round].steps[step]];
  std::string any;
  for (int r = 0; r < kNumRounds; ++r) {
    any += cat(r == 0 ? "" : ", or ", kCallName[kRounds[r].steps[0]], " (", kRounds[r].name, ")");
  }
  return any;
}

}  // namespace

EpEngine::EpEngine(const EpConfig& cfg, TokenType token_type, std::shared_ptr<SymmetricHeap> heap, size_t ep_offset,
                   double timeout_s)
    : heap_(std::move(heap)) {
  const std::string why = validate(cfg);
  MOE_A2A_CHECK(why.empty(), why);
  MOE_A2A_CHECK(heap_ && heap_->is_open(), "EpEngine needs a symmetric heap whose peers are open");
  MOE_A2A_CHECK(heap_->rank() == cfg.rank && heap_->world() == cfg.world, "heap is rank ", heap_->rank(), " of ",
                heap_->world(), ", config says rank ", cfg.rank, " of ", cfg.world);
  MOE_A2A_CHECK(timeout_s > 0, "timeout must be positive, got ", timeout_s);
  ctx_.cfg = cfg;
  ctx_.heap_layout = cfg.heap_layout();
  ctx_.ws_layout = cfg.workspace_layout();
  MOE_A2A_CHECK(ep_offset + ctx_.heap_layout.total <= heap_->bytes(), "all-to-all region [", ep_offset, ", +",
                ctx_.heap_layout.total, ") exceeds the heap of ", heap_->bytes(), " bytes");
  ctx_.heap = heap_->view();
  ctx_.ep_offset = ep_offset;
  ctx_.token_type = token_type;
  ctx_.local_experts = Divisor::of(cfg.experts_per_rank());
  ctx_.topk = Divisor::of(cfg.topk);
  ctx_.max_group_tokens = cfg.max_group_tokens();

  const int device = heap_->device();
  const DeviceGuard on_device(device);
  int sms = 0;
  MOE_A2A_GPU_CHECK(hipDeviceGetAttribute(&sms, hipDeviceAttributeMultiprocessorCount, device));
  // Every block of a fused kernel may wait for a peer's block: all must be resident at once.
  MOE_A2A_CHECK(cfg.num_blocks <= sms, "num_sms = ", cfg.num_blocks, " is more than the ", sms,
                " compute units of device ", device);
  ctx_.timeout_ticks = static_cast<uint64_t>(timeout_s * wall_clock_rate_hz(device));
  ctx_.early_launch = early_launch_supported(device);
  ctx_.y_prefetch_bytes = l2_prefetch_bytes(device) / 3;

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
  const DeviceGuard on_device(heap_->device());
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
  MOE_A2A_CHECK(state_.round < 0, "enable_profiler must be called between rounds");
  profiler_ = std::make_unique<ProfilerSession>(ctx_.heap, heap_->device(), mailbox_offset, ctx_.cfg.num_blocks,
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

EpEngine::RoundState EpEngine::expect(std::initializer_list<int> steps) {
  const int first = *steps.begin();
  // A call that starts a round first raises what the previous rounds reported.
  if (state_.round < 0) check_errors();
  MOE_A2A_CHECK(!closed_, kCallName[first], " called after close()");
  MOE_A2A_CHECK(failed_.empty(), "all-to-all is unusable after an earlier error: ", failed_);
  RoundState next = state_;
  for (const int call : steps) {
    int round = next.round;
    if (round < 0) {
      for (int r = 0; r < kNumRounds && round < 0; ++r) round = kRounds[r].steps[0] == call ? r : -1;
    }
    const bool expected = round >= 0 && kRounds[round].steps[next.round < 0 ? 0 : next.step] == call;
    MOE_A2A_CHECK(expected, kCallName[call], " called out of order: the next call must be ",
                  next_calls(next.round, next.step),
                  " (each dispatch must be combined before the next dispatch, and each backward round finished "
                  "before the next round)");
    next.round = round;
    if (++next.step == kRounds[round].num_steps) next = RoundState{-1, 0, round};
  }
  return next;
}

template <typename Launch>
void EpEngine::take(std::initializer_list<int> steps, Launch&& launch) {
  const RoundState next = expect(steps);
  launch();
  state_ = next;
}

void EpEngine::dispatch(const DispatchArgs& args, hipStream_t stream) {
  take({kDispatchSend, kDispatchRecv}, [&] { launch_dispatch(ctx_, args, Role::kBoth, stream); });
}
void EpEngine::dispatch_send(const DispatchArgs& args, hipStream_t stream) {
  take({kDispatchSend}, [&] { launch_dispatch(ctx_, args, Role::kSend, stream); });
}
void EpEngine::dispatch_recv(const DispatchArgs& args, hipStream_t stream) {
  take({kDispatchRecv}, [&] { launch_dispatch(ctx_, args, Role::kRecv, stream); });
}
void EpEngine::combine(const CombineArgs& args, hipStream_t stream) {
  take({kCombineSend, kCombineRecv}, [&] { launch_combine(ctx_, args, Role::kBoth, stream); });
}
void EpEngine::combine_send(const CombineArgs& args, hipStream_t stream) {
  take({kCombineSend}, [&] { launch_combine(ctx_, args, Role::kSend, stream); });
}
void EpEngine::combine_recv(const CombineArgs& args, hipStream_t stream) {
  take({kCombineRecv}, [&] { launch_combine(ctx_, args, Role::kRecv, stream); });
}
void EpEngine::dispatch_backward(const CombineArgs& args, hipStream_t stream) {
  MOE_A2A_CHECK(args.expert_weights == nullptr, "dispatch_backward is an unweighted combine");
  // Its sends write the peers' comb_x, which their last combine read. Right after a backward of
  // combine (autograd's order in training) that read is over: this rank ended that round only
  // after every peer's signal from its backward of combine, a kernel after its last combine. After
  // any other round it waits for every rank's start signal first (protocol.md, "Why nothing is
  // overwritten too early").
  // With the weights at the experts it also writes the peers' comb_w words, which a backward of combine that asked for
  // weight gradients leaves for its token side to read: after such a round it waits as well. (An AllToAll with the
  // weights at the experts never asks, on any rank; weights-at-experts.md, "Invariants".)
  CombineArgs a = args;
  a.await_ready = state_.last != kCombineBackwardRound || (a.sends_weight_grads && state_.last_asked_weight_grads);
  take({kDispatchBackwardSend, kCombineRecv}, [&] { launch_combine(ctx_, a, Role::kBoth, stream); });
}
void EpEngine::combine_backward(const CombineBackwardArgs& args, hipStream_t stream) {
  take({kCombineBackward}, [&] { launch_combine_backward(ctx_, args, stream); });
  state_.last_asked_weight_grads = args.grad_topk_weights != nullptr;
}

void EpEngine::set_rounds_for_test(uint64_t rounds) {
  MOE_A2A_CHECK(!closed_ && failed_.empty() && state_.round < 0,
                "set_rounds_for_test needs a usable engine between rounds");
  const DeviceGuard on_device(heap_->device());
  MOE_A2A_GPU_CHECK(hipDeviceSynchronize());
  const std::vector<uint64_t> epochs(static_cast<size_t>(ctx_.cfg.num_blocks), rounds);
  MOE_A2A_GPU_CHECK(hipMemcpy(ctx_.workspace + ctx_.ws_layout.block_epoch, epochs.data(),
                              epochs.size() * sizeof(uint64_t), hipMemcpyHostToDevice));
  const uint64_t no_error = rounds;  // an error mark of an epoch no later round will have
  MOE_A2A_GPU_CHECK(
      hipMemcpy(ctx_.workspace + ctx_.ws_layout.round_error, &no_error, sizeof(no_error), hipMemcpyHostToDevice));
  const uint64_t no_ticket = signal_word(rounds, 0u);  // of an epoch no later round has: the next draw starts over
  MOE_A2A_GPU_CHECK(
      hipMemcpy(ctx_.workspace + ctx_.ws_layout.recv_ticket, &no_ticket, sizeof(no_ticket), hipMemcpyHostToDevice));
  // The signals are the region's last ones (config.h): [group_signal, total).
  const size_t first = ctx_.heap_layout.group_signal;
  const size_t count = (ctx_.heap_layout.total - first) / sizeof(Signal);
  const std::vector<Signal> signals(count, Signal{signal_word(rounds, 0u)});
  MOE_A2A_GPU_CHECK(hipMemcpy(heap_->view().at(ctx_.cfg.rank, ctx_.ep_offset + first), signals.data(),
                              count * sizeof(Signal), hipMemcpyHostToDevice));
  state_.last = -1;  // the signals of the rounds before are gone: a backward of dispatch waits again
  // The count words keep the flag of the last dispatch, which the jump could make the next one's
  // (round_flag takes the epoch's low 31 bits): 0 is no round's.
  MOE_A2A_GPU_CHECK(hipMemset(heap_->view().at(ctx_.cfg.rank, ctx_.ep_offset + ctx_.heap_layout.recv_count), 0,
                              ctx_.cfg.recv_count_bytes()));
  MOE_A2A_GPU_CHECK(hipDeviceSynchronize());
}

std::string EpEngine::describe(const ErrorRecord& e) const {
  const int me = ctx_.cfg.rank;
  const auto code = static_cast<ErrorCode>(e.code);
  switch (code) {
    case ErrorCode::kTimeout: {
      const bool known = e.detail >= 0 && e.detail < static_cast<int>(WaitSite::kCount);
      const char* call = known ? kWaitSiteCall[e.detail] : "?";
      const char* signal = known ? kWaitSiteSignal[e.detail] : "signal";
      const std::string group = e.index >= 0 ? cat(" ", e.index) : std::string();
      // peer -1: a flagged word whose writer the waiting rank does not know (a weight gradient),
      // never written in this round: no epoch was seen.
      if (e.peer < 0) {
        return cat("rank ", me, " timed out in ", call, " waiting for a peer's ", signal, group, " (epoch ", e.expected,
                   "): a peer did not take part in the call, is far behind, or was sent a route it "
                   "does not answer");
      }
      return cat("rank ", me, " timed out in ", call, " waiting for rank ", e.peer, "'s ", signal, group,
                 " (waited for epoch ", e.expected, ", last saw epoch ", e.seen,
                 "): that rank did not take part in the call, or is far behind");
    }
    case ErrorCode::kBadExpertId:
      return cat("rank ", me, ": topk_idx holds expert id ", e.detail, " at token ", e.index, ", outside [0, ",
                 e.expected, ") and not -1 (an unused slot); that (token, k) was not sent");
    case ErrorCode::kCapacityOverflow:
      if (ctx_.cfg.packed()) {
        return cat("rank ", me, ": received ", e.seen, " (token, expert) rows in total but max_recv_tokens is ",
                   e.expected, "; the extra rows were dropped. Raise max_recv_tokens");
      }
      return cat("rank ", me, ": local expert ", e.detail, " received ", e.seen,
                 " tokens but its capacity (max_recv_tokens_per_expert) is ", e.expected,
                 "; the extra tokens were dropped. Raise max_recv_tokens_per_expert");
    case ErrorCode::kBadRoute:
      return cat("rank ", me,
                 ": the route given to a backward or combine call is not one a dispatch of this "
                 "all-to-all wrote (modified Dispatched tensors?); nothing was sent for it");
    case ErrorCode::kPeerError:
      return cat("rank ", me, ": rank ", e.peer, " reported an error in this call (see that rank's exception)");
    default:
      return cat("rank ", me, ": unknown device error code ", e.code);
  }
}

ErrorRecord EpEngine::own_error_once_written() const {
  // The code is written last, so a copy taken after reading it (and a fence) is whole. A claim
  // without a code is an own error still being written: this rank's second error, which lost the
  // claim, may have marked the round before the first wrote its code, and a peer's answer to that
  // mark may be what brought the host here (protocol.md, "Errors travel in signals"). The device
  // writes a few words; the bound covers a kernel switched out between them (ranks sharing a GPU).
  constexpr auto kWriteBound = std::chrono::seconds(1);
  const auto start = std::chrono::steady_clock::now();
  volatile const ErrorRecord* live = error_host_;
  ErrorRecord e;
  for (;;) {
    const uint32_t code = live->code;
    std::atomic_thread_fence(std::memory_order_acquire);
    std::memcpy(&e, const_cast<ErrorRecord*>(error_host_), sizeof(e));
    const bool settled = code != 0 || (e.claimed == 0 && e.code == 0);
    if (settled || std::chrono::steady_clock::now() - start > kWriteBound) return e;
    std::this_thread::yield();
  }
}

void EpEngine::check_errors() {
  if (closed_ || error_host_ == nullptr) return;
  MOE_A2A_CHECK(failed_.empty(), "all-to-all is unusable after an earlier error: ", failed_);
  volatile ErrorRecord* live = error_host_;
  // peer_report first: the device records its own error before anything that could bring a peer's
  // report back (report_error), so a peer's report seen here means this rank's own error, if any,
  // is there to be read next (the fence keeps the two reads in that order on hosts that reorder loads).
  const uint32_t peer_report = live->peer_report;
  std::atomic_thread_fence(std::memory_order_acquire);
  const uint32_t code = live->code;
  if (code == 0 && peer_report == 0) return;
  ErrorRecord e = own_error_once_written();
  // The copy decides, not `code`: an own error that landed since that read is the one raised (and
  // is not cleared unraised below), and one still being written is waited for.
  if (e.code == 0) {  // no error of this rank's own: a peer's report
    e.code = static_cast<uint32_t>(ErrorCode::kPeerError);
    e.peer = static_cast<int32_t>(peer_report) - 1;
  }
  const std::string what = describe(e);
  const auto c = static_cast<ErrorCode>(e.code);
  if (c == ErrorCode::kTimeout) {
    failed_ = what;  // raised now, and as "unusable" by every later call
  }
  std::memset(error_host_, 0, sizeof(ErrorRecord));
  MOE_A2A_CHECK(false, what);
}

}  // namespace moe_a2a
