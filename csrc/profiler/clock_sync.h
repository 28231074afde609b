// Clock alignment for the profiler: rank 0 ping-pongs with every other rank over a mailbox in
// the symmetric heap, with every peer at once (a chain of round trips each). Each round trip
// gives a sample (t0, tp, t1): rank 0's clock when it sent the ping, the peer's clock when it
// saw it, rank 0's clock when the pong came back. The exporter (python/moe_a2a/trace/clock.py)
// keeps the sample with the smallest round trip: peer offset = tp - (t0 + t1) / 2,
// error <= (t1 - t0) / 2.
#pragma once

#include <cstddef>
#include <cstdint>

#include "moe_a2a/heap.h"
#include "moe_a2a/platform/runtime.h"

namespace moe_a2a {

struct ClockSample {
  uint64_t t0;    // rank 0 ticks, ping sent
  uint64_t peer;  // peer ticks, ping seen
  uint64_t t1;    // rank 0 ticks, pong seen
};

// Symmetric-heap bytes of the mailbox (every rank allocates it at the same offset).
size_t clock_mailbox_bytes();

#if defined(MOE_A2A_HAS_GPU)
// Collective: every rank launches it with the same `iters` and `base` (the number of round
// trips made through this mailbox before). On rank 0, samples[peer * iters + i] is filled for
// peers 1..world-1; other ranks only answer. Every wait gives up after timeout_ticks and adds
// one to *timeouts (device memory).
void launch_clock_pingpong(const HeapView& heap, size_t mailbox_offset, int iters, uint64_t base,
                           uint64_t timeout_ticks, ClockSample* samples, uint32_t* timeouts, hipStream_t stream);
#endif

}  // namespace moe_a2a
