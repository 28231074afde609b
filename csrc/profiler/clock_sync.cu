#include "profiler/clock_sync.h"

#include "moe_a2a/platform/device.h"
#include "moe_a2a/platform/sync.h"

namespace moe_a2a {
namespace {

// On every rank: ping (written by rank 0); on rank 0: pong[peer] and pong_time[peer] (written
// by that peer). Sequence numbers only grow, so the mailbox never needs a reset.
struct ClockMailbox {
  uint64_t ping;
  uint64_t pong[kMaxWorld];
  uint64_t pong_time[kMaxWorld];
};

MOE_A2A_DEVICE ClockMailbox* mailbox(const HeapView& heap, int owner, size_t offset) {
  return reinterpret_cast<ClockMailbox*>(heap.at(owner, offset));
}

// Rank 0's side of one peer's chain of `iters` round trips.
MOE_A2A_DEVICE void ping_peer(const HeapView& heap, size_t offset, int peer, int iters, uint64_t base,
                              uint64_t timeout_ticks, ClockSample* samples, uint32_t* timeouts) {
  ClockMailbox* mine = mailbox(heap, 0, offset);
  ClockMailbox* theirs = mailbox(heap, peer, offset);
  uint64_t seen = 0;
  for (int i = 0; i < iters; ++i) {
    const uint64_t seq = base + i + 1;
    const uint64_t t0 = wall_clock();
    st_release_sys(&theirs->ping, seq);
    if (!wait_until_at_least_sys(&mine->pong[peer], seq, timeout_ticks, &seen)) {
      atomic_add_relaxed_gpu(timeouts, 1u);
      return;  // the peer still waiting gives up on its own
    }
    const uint64_t t1 = wall_clock();
    samples[static_cast<size_t>(peer) * iters + i] = ClockSample{t0, ld_relaxed_sys(&mine->pong_time[peer]), t1};
  }
}

// A peer's side: answers each of rank 0's pings with its clock.
MOE_A2A_DEVICE void answer_root(const HeapView& heap, size_t offset, int iters, uint64_t base, uint64_t timeout_ticks,
                                uint32_t* timeouts) {
  const int me = heap.rank;
  ClockMailbox* mine = mailbox(heap, me, offset);
  ClockMailbox* root = mailbox(heap, 0, offset);
  uint64_t seen = 0;
  for (int i = 0; i < iters; ++i) {
    const uint64_t seq = base + i + 1;
    if (!wait_until_at_least_sys(&mine->ping, seq, timeout_ticks, &seen)) {
      atomic_add_relaxed_gpu(timeouts, 1u);
      return;
    }
    const uint64_t tp = wall_clock();
    st_relaxed_sys(&root->pong_time[me], tp);
    st_release_sys(&root->pong[me], seq);  // publishes pong_time with it
  }
}

// A wave per chain, one lane of it working: a round trip is a chain of single flags, more threads would only add
// noise. On rank 0, wave p runs peer p's chain, every peer's at once, so a sync costs `iters` round trips at any
// world, not (world - 1) x iters. That matters where ranks share a GPU and a round trip waits for the GPU's time
// slices: at world 8 on one GPU, the chains one peer after another failed the profiler's tests (session 46).
// A wave each, not a lane each: the lanes of a wave leave a wait together, so one peer's late pong would delay
// another's t1.
__global__ void clock_pingpong_kernel(HeapView heap, size_t offset, int iters, uint64_t base, uint64_t timeout_ticks,
                                      ClockSample* samples, uint32_t* timeouts) {
  if (lane_id() != 0) return;
  const int wave = wave_id();
  if (heap.rank == 0) {
    if (wave >= 1 && wave < heap.world) ping_peer(heap, offset, wave, iters, base, timeout_ticks, samples, timeouts);
  } else if (wave == 0) {
    answer_root(heap, offset, iters, base, timeout_ticks, timeouts);
  }
}

}  // namespace

size_t clock_mailbox_bytes() { return (sizeof(ClockMailbox) + 255) / 256 * 256; }

void launch_clock_pingpong(const HeapView& heap, size_t mailbox_offset, int iters, uint64_t base,
                           uint64_t timeout_ticks, ClockSample* samples, uint32_t* timeouts, hipStream_t stream) {
  MOE_A2A_CHECK(iters > 0, "clock sync needs at least one round trip, got ", iters);
  const int waves = heap.rank == 0 ? heap.world : 1;
  clock_pingpong_kernel<<<1, waves * kWaveSize, 0, stream>>>(heap, mailbox_offset, iters, base, timeout_ticks, samples,
                                                             timeouts);
  MOE_A2A_GPU_CHECK(hipGetLastError());
}

}  // namespace moe_a2a
