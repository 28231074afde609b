// Host owner of one engine's profiler: the device record buffers, the clock-sync samples, and
// collection into host vectors. Torch-free. Created by EpEngine::enable_profiler().
//
//   ProfilerSession s(...);       // allocates, zeroes, syncs clocks ("before")
//   ... kernels record through s.view() ...
//   ProfileDump d = s.collect(stream);  // waits, syncs clocks ("after"), copies, resets
//
// collect() is collective (the clock sync is a ping-pong with rank 0): every rank calls it.
#pragma once

#include <cstdint>
#include <vector>

#include "moe_a2a/heap.h"
#include "moe_a2a/platform/runtime.h"
#include "moe_a2a/profiler.h"
#include "profiler/clock_sync.h"
#include "profiler/records.h"

namespace moe_a2a {

struct ProfileDump {
  int32_t rank = 0;
  int32_t world = 0;
  uint64_t clock_rate_hz = 0;  // wall_clock() ticks per second on this GPU
  int32_t num_blocks = 0;
  int32_t waves_per_block = 0;
  uint32_t capacity = 0;  // records per track
  DecodedProfile profile;
  int32_t clock_iters = 0;
  // Rank 0 only (empty elsewhere): [world][clock_iters] samples, peer 0's row unused.
  std::vector<ClockSample> clock_before, clock_after;
};

#if defined(MOE_A2A_HAS_GPU)

class ProfilerSession {
 public:
  static constexpr int kClockIters = 64;

  ProfilerSession(const HeapView& heap, int device, size_t mailbox_offset, int num_blocks, int waves_per_block,
                  uint32_t capacity, uint64_t timeout_ticks);
  ~ProfilerSession();
  ProfilerSession(const ProfilerSession&) = delete;
  ProfilerSession& operator=(const ProfilerSession&) = delete;

  const ProfilerView& view() const { return view_; }
  ProfileDump collect(hipStream_t stream);
  // Forgets what was recorded (enqueued on `stream`; no clock sync).
  void reset(hipStream_t stream);

 private:
  std::vector<ClockSample> sync_clocks(hipStream_t stream);
  void free_all();

  HeapView heap_;
  int device_;
  size_t mailbox_offset_;
  uint64_t timeout_ticks_;
  uint64_t rate_hz_;
  uint64_t clock_rounds_ = 0;  // round trips made through the mailbox so far
  ProfilerView view_{};
  ClockSample* samples_ = nullptr;  // device, [world][kClockIters]
  uint32_t* timeouts_ = nullptr;    // device
  std::vector<ClockSample> before_;
};

#endif

}  // namespace moe_a2a
