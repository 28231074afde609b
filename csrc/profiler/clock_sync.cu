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

// One thread: a round trip is a chain of single flags, more threads would only add noise.
__global__ void clock_pingpong_kernel(HeapView heap, size_t offset, int iters, uint64_t base, uint64_t timeout_ticks,
                                      ClockSample* samples, uint32_t* timeouts) {
  const int me = heap.rank;
  ClockMailbox* mine = mailbox(heap, me, offset);
  uint64_t seen = 0;
  if (me == 0) {
    for (int peer = 1; peer < heap.world; ++peer) {
      ClockMailbox* theirs = mailbox(heap, peer, offset);
      for (int i = 0; i < iters; ++i) {
        const uint64_t seq = base + i + 1;
        const uint64_t t0 = wall_clock();
        st_release_sys(&theirs->ping, seq);
        if (!wait_until_at_least_sys(&mine->pong[peer], seq, timeout_ticks, &seen)) {
          atomic_add_relaxed_gpu(timeouts, 1u);
          return;  // the peers still waiting give up on their own
        }
        const uint64_t t1 = wall_clock();
        samples[static_cast<size_t>(peer) * iters + i] = ClockSample{t0, ld_relaxed_sys(&mine->pong_time[peer]), t1};
      }
    }
  } else {
    ClockMailbox* root = mailbox(heap, 0, offset);
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
}

}  // namespace

size_t clock_mailbox_bytes() { return (sizeof(ClockMailbox) + 255) / 256 * 256; }

void launch_clock_pingpong(const HeapView& heap, size_t mailbox_offset, int iters, uint64_t base,
                           uint64_t timeout_ticks, ClockSample* samples, uint32_t* timeouts, hipStream_t stream) {
  MOE_A2A_CHECK(iters > 0, "clock sync needs at least one round trip, got ", iters);
  clock_pingpong_kernel<<<1, 1, 0, stream>>>(heap, mailbox_offset, iters, base, timeout_ticks, samples, timeouts);
  MOE_A2A_GPU_CHECK(hipGetLastError());
}

}  // namespace moe_a2a
