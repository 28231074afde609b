// Kernels that exercise the symmetric heap and the sync primitives across GPUs: a pattern
// put through translate() checked byte by byte on the peer, and a message-passing ping-pong
// (data then flag; the reader must never see the flag without the data) that also measures
// the one-way flag latency. Used by the GPU tests and by benchmarks/microbench.py.
#pragma once

#include <cstdint>

#include "moe_a2a/heap.h"
#include "moe_a2a/platform/runtime.h"

namespace moe_a2a {

// How the message-passing test publishes and observes the flag.
enum class SyncMode : int32_t {
  kReleaseAcquire = 0,  // st_release_sys / spin on ld_acquire_sys
  kAtomicWait = 1,      // atomic_add_release_sys / wait_until_at_least_sys (relaxed spin + acquire)
  kFences = 2,          // fence_acq_rel_sys + st_relaxed_sys / relaxed spin + fence_acq_rel_sys
};
inline constexpr int kNumSyncModes = 3;

// Result words written by the test kernels (device memory, zeroed by the caller).
struct SelftestResult {
  uint64_t mismatches;  // words that did not hold the expected value
  uint64_t timeouts;    // waits that gave up
  uint64_t ticks;       // wall_clock() ticks spent in the ping-pong loop (writer side)
};

// Puts `words` uint32 of a (writer, reader, index) pattern into every peer's heap at
// region_offset + me * words * 4, then raises flag[me] (flag_offset, uint64 per rank) to `epoch`.
void launch_put_pattern(const HeapView& heap, size_t region_offset, size_t words, size_t flag_offset, uint64_t epoch,
                        hipStream_t stream);
// Waits for every writer's flag (bounded) and counts mismatching words into *result.
void launch_check_pattern(const HeapView& heap, size_t region_offset, size_t words, size_t flag_offset, uint64_t epoch,
                          uint64_t timeout_ticks, SelftestResult* result, hipStream_t stream);
// Ring ping-pong: rank r sends `iters` messages of `data_words` uint32 to rank r+1 and acks
// the messages of rank r-1. Mailbox at `mailbox_offset`: data_words uint32 then two uint64
// (flag, ack), 256-byte aligned. Flag values are base+1 .. base+iters.
void launch_message_passing(const HeapView& heap, size_t mailbox_offset, int data_words, int iters, uint64_t base,
                            SyncMode mode, uint64_t timeout_ticks, SelftestResult* result, hipStream_t stream);
size_t mailbox_bytes(int data_words);

}  // namespace moe_a2a
