#include "profiler/session.h"

#include <cmath>
#include <new>

#include "moe_a2a/platform/device.h"
#include "moe_a2a/platform/device_guard.h"

namespace moe_a2a {

ProfilerSession::ProfilerSession(const HeapView& heap, int device, size_t mailbox_offset, int num_blocks,
                                 int waves_per_block, uint32_t capacity, uint64_t timeout_ticks)
    : heap_(heap), device_(device), mailbox_offset_(mailbox_offset), timeout_ticks_(timeout_ticks) {
  MOE_A2A_CHECK(capacity > 0 && capacity <= (1u << 20), "profiler capacity per track must be in [1, 2^20], got ",
                capacity);
  MOE_A2A_CHECK(mailbox_offset + clock_mailbox_bytes() <= heap.bytes, "profiler clock mailbox at ", mailbox_offset,
                " is outside the heap of ", heap.bytes, " bytes");
  rate_hz_ = static_cast<uint64_t>(std::llround(wall_clock_rate_hz(device)));
  view_.capacity = capacity;
  view_.num_blocks = num_blocks;
  view_.waves_per_block = waves_per_block;
  view_.rank = heap.rank;
  const size_t tracks = static_cast<size_t>(num_blocks) * waves_per_block;
  const DeviceGuard on_device(device);
  try {
    MOE_A2A_GPU_CHECK(hipMalloc(reinterpret_cast<void**>(&view_.records), tracks * capacity * sizeof(ProfilerRecord)));
    MOE_A2A_GPU_CHECK(hipMalloc(reinterpret_cast<void**>(&view_.counts), tracks * sizeof(uint32_t)));
    MOE_A2A_GPU_CHECK(hipMalloc(reinterpret_cast<void**>(&samples_), heap.world * kClockIters * sizeof(ClockSample)));
    MOE_A2A_GPU_CHECK(hipMalloc(reinterpret_cast<void**>(&timeouts_), sizeof(uint32_t)));
    MOE_A2A_GPU_CHECK(hipMemset(samples_, 0, heap.world * kClockIters * sizeof(ClockSample)));
    reset(nullptr);
    before_ = sync_clocks(nullptr);
  } catch (...) {
    free_all();
    throw;
  }
}

ProfilerSession::~ProfilerSession() { free_all(); }

void ProfilerSession::free_all() {
  // Best effort: a destructor must not throw, and the pointers may be partly set.
  const DeviceGuard on_device(device_, std::nothrow);
  (void)hipDeviceSynchronize();
  for (void* p : {static_cast<void*>(view_.records), static_cast<void*>(view_.counts), static_cast<void*>(samples_),
                  static_cast<void*>(timeouts_)}) {
    if (p != nullptr) (void)hipFree(p);
  }
  view_.records = nullptr;
  view_.counts = nullptr;
  samples_ = nullptr;
  timeouts_ = nullptr;
}

void ProfilerSession::reset(hipStream_t stream) {
  const size_t tracks = static_cast<size_t>(view_.num_blocks) * view_.waves_per_block;
  // Records too, not only counts: a slot reserved by a kernel that never finished must read as
  // unwritten (start == 0), not as a stale event of an earlier session.
  MOE_A2A_GPU_CHECK(hipMemsetAsync(view_.records, 0, tracks * view_.capacity * sizeof(ProfilerRecord), stream));
  MOE_A2A_GPU_CHECK(hipMemsetAsync(view_.counts, 0, tracks * sizeof(uint32_t), stream));
}

std::vector<ClockSample> ProfilerSession::sync_clocks(hipStream_t stream) {
  MOE_A2A_GPU_CHECK(hipMemsetAsync(timeouts_, 0, sizeof(uint32_t), stream));
  launch_clock_pingpong(heap_, mailbox_offset_, kClockIters, clock_rounds_, timeout_ticks_, samples_, timeouts_,
                        stream);
  clock_rounds_ += kClockIters;
  std::vector<ClockSample> samples(static_cast<size_t>(heap_.world) * kClockIters);
  uint32_t timeouts = 0;
  MOE_A2A_GPU_CHECK(
      hipMemcpyAsync(samples.data(), samples_, samples.size() * sizeof(ClockSample), hipMemcpyDeviceToHost, stream));
  MOE_A2A_GPU_CHECK(hipMemcpyAsync(&timeouts, timeouts_, sizeof(uint32_t), hipMemcpyDeviceToHost, stream));
  MOE_A2A_GPU_CHECK(hipStreamSynchronize(stream));
  MOE_A2A_CHECK(timeouts == 0, "rank ", heap_.rank, ": profiler clock sync timed out (", timeouts,
                " wait(s)); every rank must collect the profile together");
  if (heap_.rank != 0) samples.clear();
  return samples;
}

ProfileDump ProfilerSession::collect(hipStream_t stream) {
  const DeviceGuard on_device(device_);
  MOE_A2A_GPU_CHECK(hipStreamSynchronize(stream));  // the profiled kernels are done
  ProfileDump d;
  d.clock_after = sync_clocks(stream);
  const size_t tracks = static_cast<size_t>(view_.num_blocks) * view_.waves_per_block;
  std::vector<ProfilerRecord> records(tracks * view_.capacity);
  std::vector<uint32_t> counts(tracks);
  MOE_A2A_GPU_CHECK(hipMemcpyAsync(records.data(), view_.records, records.size() * sizeof(ProfilerRecord),
                                   hipMemcpyDeviceToHost, stream));
  MOE_A2A_GPU_CHECK(
      hipMemcpyAsync(counts.data(), view_.counts, counts.size() * sizeof(uint32_t), hipMemcpyDeviceToHost, stream));
  MOE_A2A_GPU_CHECK(hipStreamSynchronize(stream));
  d.rank = heap_.rank;
  d.world = heap_.world;
  d.clock_rate_hz = rate_hz_;
  d.num_blocks = view_.num_blocks;
  d.waves_per_block = view_.waves_per_block;
  d.capacity = view_.capacity;
  d.profile = decode_profile(records.data(), counts.data(), view_.capacity, view_.num_blocks, view_.waves_per_block);
  d.clock_iters = kClockIters;
  d.clock_before = std::move(before_);
  before_ = d.clock_after;  // the next session starts where this one ended
  reset(stream);
  return d;
}

}  // namespace moe_a2a
