// The host side of one all-to-all: owns the local workspace and the host-mapped error record,
// holds the symmetric heap alive, checks the order of calls, and turns device-reported errors
// into exceptions. Torch-free: takes raw pointers and a stream.
#pragma once

#include <initializer_list>
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

  // The calls of every round, in the order the round table (engine.cu) allows them. The fused
  // calls take two steps of a round in one launch: dispatch = dispatch_send + dispatch_recv,
  // combine = combine_send + combine_recv, dispatch_backward = its send + combine_recv.
  void dispatch(const DispatchArgs& args, hipStream_t stream);
  void dispatch_send(const DispatchArgs& args, hipStream_t stream);
  void dispatch_recv(const DispatchArgs& args, hipStream_t stream);
  void combine(const CombineArgs& args, hipStream_t stream);
  void combine_send(const CombineArgs& args, hipStream_t stream);
  void combine_recv(const CombineArgs& args, hipStream_t stream);
  void dispatch_backward(const CombineArgs& args, hipStream_t stream);
  void combine_backward(const CombineBackwardArgs& args, hipStream_t stream);

  // Test hook: sets every block's completed-round count to `rounds` and every signal in this
  // rank's heap region to epoch `rounds`, as if that many rounds had run. Synchronous; every
  // rank must call it between the same two rounds with no kernel of this all-to-all running
  // anywhere (a barrier before and after).
  void set_rounds_for_test(uint64_t rounds);
  // Test hook: the host-mapped error record, for a test that writes one as a kernel would.
  ErrorRecord* error_record_for_test() { return error_host_; }

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
  uint8_t* workspace() const { return ctx_.workspace; }
  size_t workspace_bytes() const { return ctx_.ws_layout.total; }
  const SymmetricHeap& heap() const { return *heap_; }

 private:
  // Where this rank is in the round table (engine.cu): a round, and the calls of it taken.
  struct RoundState {
    int round = -1;  // -1 between rounds
    int step = 0;
    int last = -1;                         // the kind of the last round completed (-1: none yet), as round
    bool last_asked_weight_grads = false;  // that round, a backward of combine, asked for weight gradients
  };
  // Raises unless the calls `steps` may come now, in this order, and returns the state after
  // them; take() launches, then stores it (a launch that throws leaves the state as it was).
  // A call that starts a round first raises any error an earlier round reported.
  RoundState expect(std::initializer_list<int> steps);
  // expect(steps), then launch(), then the new state.
  template <typename Launch>
  void take(std::initializer_list<int> steps, Launch&& launch);
  std::string describe(const ErrorRecord& e) const;
  // A copy of the error record with this rank's own error whole, once it is written (check_errors).
  ErrorRecord own_error_once_written() const;

  EpContext ctx_{};
  std::shared_ptr<SymmetricHeap> heap_;
#if defined(MOE_A2A_ENABLE_PROFILER)
  std::unique_ptr<ProfilerSession> profiler_;
#endif
  ErrorRecord* error_host_ = nullptr;
  RoundState state_;
  std::string failed_;  // non-empty once the engine cannot be used any more
  bool closed_ = false;
};

}  // namespace moe_a2a
