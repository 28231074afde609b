// The machine's floor for one kernel per phase of an all-to-all: a bare exchange with nothing
// but the payload and the signals. Used by python/moe_a2a/microbench.py (floor_us) and the
// benchmarks; see /work/shared/design/BENCHMARKS.md "The machine's floor".
//
// One launch = one phase. Every rank runs the kernel with the same `blocks`; block b
//   1. stores its share (a contiguous 1/blocks of `bytes`) into the NEXT rank's heap at
//      region_offset with 16-byte stores (uint4), values from registers (no local reads);
//   2. publishes one signal on the next rank: st_release_sys(flags[b], epoch), flags at
//      flags_offset (one uint64 per source block: no single contended counter);
//   3. waits (bounded by timeout_ticks) until flags[s] >= epoch on its own rank for every block
//      s of the PREVIOUS rank (the threads of the block wait for one flag each).
// At world 2 next and previous are the same peer: both GPUs send `bytes` each way at once.
//
// The epoch lives in device memory, so a CUDA graph of many launches replays without any value
// from the host: workspace (at workspace_offset of the LOCAL heap, never touched by peers) holds
// one uint64 per block, epoch = workspace[b] + 1, and block b writes it back at its end; then
// workspace[blocks] counts waits that timed out (the caller reads it after the run).
// Every rank must launch the same sequence with the same `blocks`, and flags and workspace
// must be zero (on every rank, before any rank launches) when a sequence starts.
#pragma once

#include <cstddef>
#include <cstdint>

#include "moe_a2a/heap.h"
#include "moe_a2a/platform/runtime.h"

namespace moe_a2a {

inline constexpr int kFloorThreads = 512;

// Bytes of the flag array (blocks x uint64) and of the workspace ((blocks + 1) x uint64).
size_t floor_flags_bytes(int blocks);
size_t floor_workspace_bytes(int blocks);

// One phase on `stream` (asynchronous, graph-capturable: no host sync, no allocation).
// Checks: bytes and region_offset multiples of 16, flags/workspace 8-byte aligned and inside the
// heap, 1 <= blocks <= the device's multiprocessor count (every block must be resident: blocks
// wait for each other across GPUs).
void launch_floor_exchange(const HeapView& heap, size_t region_offset, size_t bytes, int blocks, size_t flags_offset,
                           size_t workspace_offset, uint64_t timeout_ticks, hipStream_t stream);

}  // namespace moe_a2a
