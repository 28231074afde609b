// The host side of one all-to-all: owns the local workspace and the host-mapped error record,
// holds the symmetric heap alive, checks the order of calls, and turns device-reported errors
// into exceptions. Torch-free: takes raw pointers and a stream.
#pragma once

#include <memory>
#include <string>

#include "heap/symmetric_heap.h"
#include "moe_a2a/ep/kernels.h"
#include "profiler/session.h"

namespace moe_a2a {

class EpEngine {
 public:
  // `ep_offset` is where this all-to-all's region (cfg.heap_layout().total bytes) starts in
  // every rank's heap; the caller allocated it symmetrically.
  EpEngine(const EpConfig& cfg, TokenType token_type, std::shared_ptr<SymmetricHeap> heap, size_t ep_offset,
           double timeout_s);
  ~EpEngine();
  EpEngine(const EpEngine&) = delete;
  EpEngine& operator=(const EpEngine&) = delete;

  void dispatch_send(const DispatchSendArgs& args, hipStream_t stream);
  void dispatch_recv(const DispatchRecvArgs& args, hipStream_t stream);
  void combine_send(const CombineSendArgs& args, hipStream_t stream);
  void combine_recv(void* out, hipStream_t stream);

  // Raises if a kernel reported an error. Reads host-mapped memory, never synchronises: an
  // error of a call still running shows up at a later check. Timeouts leave the engine failed
  // for good (peers are out of step); bad input and overflow are reported once, then cleared,
  // because the round itself completed on every rank.
  void check_errors();
  void close();

#if defined(MOE_A2A_ENABLE_PROFILER)
  // Starts recording every kernel of this engine (collective: syncs clocks with rank 0).
  // `mailbox_offset`: clock_mailbox_bytes() allocated symmetrically in the engine's heap.
  void enable_profiler(uint32_t capacity_per_track, size_t mailbox_offset);
  bool profiling() const { return profiler_ != nullptr; }
  // Collective. Waits for the stream, copies the records out and starts a new session.
  ProfileDump collect_profile(hipStream_t stream);
  void reset_profile(hipStream_t stream);
#endif

  const EpConfig& config() const { return ctx_.cfg; }
  int num_tokens() const { return num_tokens_; }
  uint8_t* workspace() const { return ctx_.workspace; }
  size_t workspace_bytes() const { return ctx_.ws_layout.total; }
  const SymmetricHeap& heap() const { return *heap_; }

 private:
  enum class Phase { kIdle, kSent, kReceived, kCombineSent };
  void expect(Phase phase, const char* call) const;
  std::string describe(const ErrorRecord& e) const;

  EpContext ctx_{};
  std::shared_ptr<SymmetricHeap> heap_;
#if defined(MOE_A2A_ENABLE_PROFILER)
  std::unique_ptr<ProfilerSession> profiler_;
#endif
  ErrorRecord* error_host_ = nullptr;
  Phase phase_ = Phase::kIdle;
  int num_tokens_ = 0;
  std::string failed_;  // non-empty once the engine cannot be used any more
  bool closed_ = false;
};

}  // namespace moe_a2a
