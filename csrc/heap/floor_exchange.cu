#include "floor_exchange.h"

#include "moe_a2a/platform/device.h"
#include "moe_a2a/platform/sync.h"

namespace moe_a2a {
namespace {

__global__ void __launch_bounds__(kFloorThreads)
    floor_exchange_kernel(HeapView heap, size_t region_offset, size_t n16, size_t flags_offset, size_t workspace_offset,
                          uint64_t timeout_ticks) {
  const int me = heap.rank;
  const int next = (me + 1) % heap.world;
  const int blocks = static_cast<int>(gridDim.x);
  const int b = static_cast<int>(blockIdx.x);
  uint64_t* workspace = reinterpret_cast<uint64_t*>(heap.at(me, workspace_offset));
  // Only this block writes workspace[b], at the end of earlier launches: the kernel boundary
  // orders that store before this load.
  const uint64_t epoch = workspace[b] + 1;

  // 1. This block's contiguous share of the payload, 16 bytes a store.
  const size_t per_block = (n16 + blocks - 1) / blocks;
  const size_t begin = per_block * b < n16 ? per_block * b : n16;
  const size_t end = begin + per_block < n16 ? begin + per_block : n16;
  uint4* dst = reinterpret_cast<uint4*>(heap.at(next, region_offset));
  const uint4 v = make_uint4(static_cast<uint32_t>(epoch), static_cast<uint32_t>(b), static_cast<uint32_t>(threadIdx.x),
                             static_cast<uint32_t>(me));
  for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x) dst[i] = v;
  __syncthreads();  // every thread's stores before the release below

  // 2. One signal per block on the next rank.
  if (threadIdx.x == 0) {
    st_release_sys(reinterpret_cast<uint64_t*>(heap.at(next, flags_offset)) + b, epoch);
  }

  // 3. Every block of the previous rank has signalled this epoch (one flag per thread).
  const uint64_t* flags = reinterpret_cast<const uint64_t*>(heap.at(me, flags_offset));
  bool timed_out = false;
  for (int s = static_cast<int>(threadIdx.x); s < blocks; s += static_cast<int>(blockDim.x)) {
    uint64_t seen = 0;
    if (!wait_until_at_least_sys(flags + s, epoch, timeout_ticks, &seen)) timed_out = true;
  }
  if (timed_out) atomicAdd(reinterpret_cast<unsigned long long*>(workspace + blocks), 1ull);
  __syncthreads();  // all waits done (and every thread has read the old epoch) before it moves on
  if (threadIdx.x == 0) workspace[b] = epoch;
}

}  // namespace

size_t floor_flags_bytes(int blocks) { return static_cast<size_t>(blocks > 0 ? blocks : 0) * sizeof(uint64_t); }

size_t floor_workspace_bytes(int blocks) {
  return (static_cast<size_t>(blocks > 0 ? blocks : 0) + 1) * sizeof(uint64_t);
}

void launch_floor_exchange(const HeapView& heap, size_t region_offset, size_t bytes, int blocks, size_t flags_offset,
                           size_t workspace_offset, uint64_t timeout_ticks, hipStream_t stream) {
  int device = 0;
  MOE_A2A_GPU_CHECK(hipGetDevice(&device));
  int sms = 0;
  MOE_A2A_GPU_CHECK(hipDeviceGetAttribute(&sms, hipDeviceAttributeMultiprocessorCount, device));
  MOE_A2A_CHECK(blocks >= 1 && blocks <= sms, "floor_exchange: blocks must be in [1, ", sms,
                "] (every block must be resident), got ", blocks);
  MOE_A2A_CHECK(bytes % 16 == 0 && region_offset % 16 == 0, "floor_exchange: bytes (", bytes, ") and region_offset (",
                region_offset, ") must be multiples of 16");
  MOE_A2A_CHECK(region_offset <= heap.bytes && bytes <= heap.bytes - region_offset, "floor_exchange: region [",
                region_offset, ", +", bytes, ") is outside the heap of ", heap.bytes, " bytes");
  const size_t fb = floor_flags_bytes(blocks), wb = floor_workspace_bytes(blocks);
  MOE_A2A_CHECK(flags_offset % 8 == 0 && flags_offset <= heap.bytes && fb <= heap.bytes - flags_offset,
                "floor_exchange: flags [", flags_offset, ", +", fb, ") misaligned or outside the heap");
  MOE_A2A_CHECK(workspace_offset % 8 == 0 && workspace_offset <= heap.bytes && wb <= heap.bytes - workspace_offset,
                "floor_exchange: workspace [", workspace_offset, ", +", wb, ") misaligned or outside the heap");
  floor_exchange_kernel<<<blocks, kFloorThreads, 0, stream>>>(heap, region_offset, bytes / 16, flags_offset,
                                                              workspace_offset, timeout_ticks);
  MOE_A2A_GPU_CHECK(hipGetLastError());
}

}  // namespace moe_a2a
