// In-kernel profiler, device side: the record format, the view kernels write through, and the
// RAII helpers the EP kernels use. Everything that records compiles to nothing unless
// MOE_A2A_ENABLE_PROFILER is defined (CMake option MOE_A2A_ENABLE_PROFILER, or MOE_A2A_PROFILE=1
// for setup.py), so a default build runs the same kernel code as one without a profiler.
//
// Tracks: every wave of every block has its own record buffer ("track"), written only by the
// wave's lane 0, so a track's events come from one thread in program order; spans are scoped
// objects, hence they nest on every track by construction. The trace shows track
// (block b, wave w) as tid = b * waves_per_block + w + 1, named "block b wave w". Stages that
// the whole block runs together (waits, routing, publishing) are recorded by wave 0 only.
//
// Records past a track's capacity are not written; the track's count keeps growing, and the
// host reports count - capacity as dropped.
#pragma once

#include <cstddef>
#include <cstdint>

#include "moe_a2a/heap.h"
#include "moe_a2a/platform/backend.h"
#include "moe_a2a/profiler_events.h"

namespace moe_a2a {

// One event as the device writes it (24 bytes, one store per field by one lane).
struct ProfilerRecord {
  uint64_t start;  // wall_clock() ticks of this GPU
  uint64_t end;    // >= start
  uint16_t event;  // ProfilerEvent
  uint16_t wave;   // wave inside the block: the track the record belongs to
  int32_t arg;     // peer rank, token, row... (see profiler_events.h); -1 when none
};
static_assert(sizeof(ProfilerRecord) == 24, "ProfilerRecord is a 24-byte wire format");

MOE_A2A_HD inline ProfilerRecord make_profiler_record(ProfilerEvent e, int wave, uint64_t start, uint64_t end,
                                                      int32_t arg) {
  return ProfilerRecord{start, end, static_cast<uint16_t>(e), static_cast<uint16_t>(wave), arg};
}

// Where this rank's kernels record. Lives in EpContext always; all zero means "not profiling"
// (always so when the profiler is compiled out).
struct ProfilerView {
  ProfilerRecord* records;  // [num_blocks * waves_per_block][capacity], device memory
  uint32_t* counts;         // [num_blocks * waves_per_block]: records attempted, may exceed capacity
  uint32_t capacity;        // records per track
  int32_t num_blocks;
  int32_t waves_per_block;
  int32_t rank;
};

}  // namespace moe_a2a

#if defined(MOE_A2A_ENABLE_PROFILER) && defined(MOE_A2A_GPU_COMPILER)

#include "moe_a2a/platform/device.h"

namespace moe_a2a {

// Arrival time of each peer's flag during a wait (shared memory: a __shared__ variable of a
// device function is one per block, the same for every call from one kernel).
MOE_A2A_DEVICE inline uint64_t* profiler_arrivals() {
  __shared__ uint64_t arrivals[kMaxWorld];
  return arrivals;
}

// One per wave, declared first in a kernel. Reserves the wave's kernel span on construction
// (so it is kept whenever the kernel started with room) and writes it on destruction, early
// returns included. Holds the track's count in a register: one load at the start, one store
// at the end.
class ProfilerTrack {
 public:
  MOE_A2A_DEVICE ProfilerTrack(const ProfilerView& v, ProfilerEvent kernel) : kernel_(kernel) {
    on_ = v.records != nullptr && lane_id() == 0;
    if (!on_) return;
    const uint32_t track = blockIdx.x * static_cast<uint32_t>(v.waves_per_block) + static_cast<uint32_t>(wave_id());
    records_ = v.records + static_cast<size_t>(track) * v.capacity;
    count_ = v.counts + track;
    capacity_ = v.capacity;
    n_ = *count_;
    slot_ = n_++;
    start_ = wall_clock();
  }
  MOE_A2A_DEVICE ~ProfilerTrack() {
    if (!on_) return;
    const uint64_t end = wall_clock();
    if (slot_ < capacity_) records_[slot_] = make_profiler_record(kernel_, wave_id(), start_, end, -1);
    *count_ = n_;
  }
  ProfilerTrack(const ProfilerTrack&) = delete;
  ProfilerTrack& operator=(const ProfilerTrack&) = delete;

  MOE_A2A_DEVICE bool on() const { return on_; }
  MOE_A2A_DEVICE uint64_t now() const { return on_ ? wall_clock() : 0; }

  // An event [start, now] on this wave's track.
  MOE_A2A_DEVICE void record(ProfilerEvent e, uint64_t start, int32_t arg) { record(e, start, wall_clock(), arg); }
  MOE_A2A_DEVICE void record(ProfilerEvent e, uint64_t start, uint64_t end, int32_t arg) {
    if (!on_) return;
    if (n_ < capacity_) records_[n_] = make_profiler_record(e, wave_id(), start, end, arg);
    ++n_;
  }

  // After a block-wide wait whose waiting threads stored their arrival times in
  // profiler_arrivals()[0, world) and a __syncthreads(): wave 0 records [start, last arrival]
  // with the peer that arrived last, the one the block actually waited on.
  MOE_A2A_DEVICE void record_wait(ProfilerEvent e, uint64_t start, int world) {
    if (!on_ || wave_id() != 0) return;
    const uint64_t* a = profiler_arrivals();
    int last = 0;
    for (int r = 1; r < world; ++r) last = a[r] > a[last] ? r : last;
    record(e, start, a[last] > start ? a[last] : start, last);
  }

 private:
  ProfilerEvent kernel_;
  bool on_ = false;
  ProfilerRecord* records_ = nullptr;
  uint32_t* count_ = nullptr;
  uint32_t capacity_ = 0;
  uint32_t n_ = 0;
  uint32_t slot_ = 0;
  uint64_t start_ = 0;
};

// A scoped event on the current wave's track; `when` false records nothing (e.g. a block-level
// stage in waves other than 0).
class ProfilerSpan {
 public:
  MOE_A2A_DEVICE ProfilerSpan(ProfilerTrack& t, ProfilerEvent e, int32_t arg, bool when = true)
      : t_(t), e_(e), arg_(arg), on_(when && t.on()), start_(on_ ? wall_clock() : 0) {}
  MOE_A2A_DEVICE ~ProfilerSpan() {
    if (on_) t_.record(e_, start_, arg_);
  }
  ProfilerSpan(const ProfilerSpan&) = delete;
  ProfilerSpan& operator=(const ProfilerSpan&) = delete;
  MOE_A2A_DEVICE void set_arg(int32_t arg) { arg_ = arg; }

 private:
  ProfilerTrack& t_;
  ProfilerEvent e_;
  int32_t arg_;
  bool on_;
  uint64_t start_;
};

}  // namespace moe_a2a

// MOE_A2A_PROFILE(code): code only in profiler builds (what the null track below cannot say:
// the waits' arrival times).
#define MOE_A2A_PROFILE(...) __VA_ARGS__

#else  // profiler compiled out: no code at all

#if defined(MOE_A2A_GPU_COMPILER)
#include "moe_a2a/platform/device.h"

namespace moe_a2a {

// The same calls as above, doing nothing: the kernels call their track and spans with no #if,
// and every such call compiles to no code.
class ProfilerTrack {
 public:
  MOE_A2A_DEVICE ProfilerTrack(const ProfilerView&, ProfilerEvent) {}
  MOE_A2A_DEVICE bool on() const { return false; }
  MOE_A2A_DEVICE uint64_t now() const { return 0; }
  MOE_A2A_DEVICE void record(ProfilerEvent, uint64_t, int32_t) {}
  MOE_A2A_DEVICE void record(ProfilerEvent, uint64_t, uint64_t, int32_t) {}
  MOE_A2A_DEVICE void record_wait(ProfilerEvent, uint64_t, int) {}
};
class ProfilerSpan {
 public:
  MOE_A2A_DEVICE ProfilerSpan(ProfilerTrack&, ProfilerEvent, int32_t, bool = true) {}
  MOE_A2A_DEVICE void set_arg(int32_t) {}
};

}  // namespace moe_a2a
#endif

#define MOE_A2A_PROFILE(...)

#endif
