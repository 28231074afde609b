#include "heap_selftest.h"

#include "moe_a2a/platform/device.h"
#include "moe_a2a/platform/sync.h"

namespace moe_a2a {
namespace {

constexpr int kTestBlock = 256;

MOE_A2A_DEVICE uint32_t pattern(int writer, int reader, size_t i) {
  uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ (static_cast<uint32_t>(writer) << 24) ^
               (static_cast<uint32_t>(reader) << 16);
  h ^= h >> 13;
  return h * 0x5bd1e995u;
}

// Block p writes into peer p.
__global__ void put_pattern_kernel(HeapView heap, size_t region_offset, size_t words, size_t flag_offset,
                                   uint64_t epoch) {
  const int me = heap.rank;
  const int peer = blockIdx.x;
  // translate(): local object -> the same object on the peer.
  uint32_t* local_dst = reinterpret_cast<uint32_t*>(heap.at(me, region_offset)) + static_cast<size_t>(me) * words;
  uint32_t* dst = heap.translate(local_dst, peer);
  for (size_t i = threadIdx.x; i < words; i += blockDim.x) dst[i] = pattern(me, peer, i);
  __syncthreads();
  if (threadIdx.x == 0) {
    uint64_t* flag = heap.translate(reinterpret_cast<uint64_t*>(heap.at(me, flag_offset)) + me, peer);
    st_release_sys(flag, epoch);
  }
}

// Block s checks what writer s put here.
__global__ void check_pattern_kernel(HeapView heap, size_t region_offset, size_t words, size_t flag_offset,
                                     uint64_t epoch, uint64_t timeout_ticks, SelftestResult* result) {
  __shared__ bool ok;
  const int me = heap.rank;
  const int src = blockIdx.x;
  if (threadIdx.x == 0) {
    uint64_t seen = 0;
    ok = wait_until_at_least_sys(reinterpret_cast<uint64_t*>(heap.at(me, flag_offset)) + src, epoch, timeout_ticks,
                                 &seen);
    if (!ok) atomicAdd(reinterpret_cast<unsigned long long*>(&result->timeouts), 1ull);
  }
  __syncthreads();
  if (!ok) return;
  const uint32_t* got =
      reinterpret_cast<const uint32_t*>(heap.at(me, region_offset)) + static_cast<size_t>(src) * words;
  unsigned long long bad = 0;
  for (size_t i = threadIdx.x; i < words; i += blockDim.x) bad += got[i] != pattern(src, me, i);
  if (bad) atomicAdd(reinterpret_cast<unsigned long long*>(&result->mismatches), bad);
}

struct Mailbox {
  uint32_t* data;
  uint64_t* flag;
  uint64_t* ack;
};

MOE_A2A_DEVICE Mailbox mailbox_at(uint8_t* base, int data_words) {
  const size_t flag_at = (static_cast<size_t>(data_words) * 4 + 255) / 256 * 256;
  return Mailbox{reinterpret_cast<uint32_t*>(base), reinterpret_cast<uint64_t*>(base + flag_at),
                 reinterpret_cast<uint64_t*>(base + flag_at + 8)};
}

MOE_A2A_DEVICE void publish(uint64_t* flag, uint64_t value, SyncMode mode) {
  switch (mode) {
    case SyncMode::kReleaseAcquire:
      st_release_sys(flag, value);
      break;
    case SyncMode::kAtomicWait:
      atomic_add_release_sys(flag, uint64_t{1});
      break;  // flag counts messages
    case SyncMode::kFences:
      fence_acq_rel_sys();
      st_relaxed_sys(flag, value);
      break;
  }
}

// Returns false on timeout.
MOE_A2A_DEVICE bool observe(const uint64_t* flag, uint64_t value, SyncMode mode, uint64_t timeout_ticks) {
  const uint64_t start = wall_clock();
  switch (mode) {
    case SyncMode::kReleaseAcquire:
      while (ld_acquire_sys(flag) < value) {
        if (wall_clock() - start > timeout_ticks) return false;
      }
      return true;
    case SyncMode::kAtomicWait: {
      uint64_t seen;
      return wait_until_at_least_sys(flag, value, timeout_ticks, &seen);
    }
    case SyncMode::kFences:
      while (ld_relaxed_sys(flag) < value) {
        if (wall_clock() - start > timeout_ticks) return false;
      }
      fence_acq_rel_sys();
      return true;
  }
  return false;
}

// Block 0 writes to rank me+1, block 1 reads from rank me-1. Both must be resident at once.
__global__ void message_passing_kernel(HeapView heap, size_t mailbox_offset, int data_words, int iters, uint64_t base,
                                       SyncMode mode, uint64_t timeout_ticks, SelftestResult* result) {
  __shared__ bool ok;
  const int me = heap.rank;
  const int next = (me + 1) % heap.world;
  const int prev = (me + heap.world - 1) % heap.world;
  const Mailbox mine = mailbox_at(heap.at(me, mailbox_offset), data_words);
  if (threadIdx.x == 0) ok = true;
  __syncthreads();

  if (blockIdx.x == 0) {  // writer
    const Mailbox theirs = mailbox_at(heap.at(next, mailbox_offset), data_words);
    const uint64_t start = wall_clock();
    for (int i = 1; i <= iters && ok; ++i) {
      const uint64_t value = base + i;
      for (int j = threadIdx.x; j < data_words; j += blockDim.x) theirs.data[j] = static_cast<uint32_t>(value);
      __syncthreads();
      if (threadIdx.x == 0) {
        publish(theirs.flag, value, mode);
        if (!observe(mine.ack, value, mode, timeout_ticks)) {
          atomicAdd(reinterpret_cast<unsigned long long*>(&result->timeouts), 1ull);
          ok = false;
        }
      }
      __syncthreads();  // the peer has read message i before we overwrite it with i+1
    }
    if (threadIdx.x == 0) result->ticks = wall_clock() - start;
  } else {  // reader
    const Mailbox writers = mailbox_at(heap.at(prev, mailbox_offset), data_words);
    unsigned long long bad = 0;
    for (int i = 1; i <= iters && ok; ++i) {
      const uint64_t value = base + i;
      if (threadIdx.x == 0 && !observe(mine.flag, value, mode, timeout_ticks)) {
        atomicAdd(reinterpret_cast<unsigned long long*>(&result->timeouts), 1ull);
        ok = false;
      }
      __syncthreads();
      if (!ok) break;
      for (int j = threadIdx.x; j < data_words; j += blockDim.x) bad += mine.data[j] != static_cast<uint32_t>(value);
      __syncthreads();  // every thread has read the data before the ack lets the writer go on
      if (threadIdx.x == 0) publish(writers.ack, value, mode);
    }
    if (bad) atomicAdd(reinterpret_cast<unsigned long long*>(&result->mismatches), bad);
  }
}

}  // namespace

size_t mailbox_bytes(int data_words) { return (static_cast<size_t>(data_words) * 4 + 255) / 256 * 256 + 256; }

void launch_put_pattern(const HeapView& heap, size_t region_offset, size_t words, size_t flag_offset, uint64_t epoch,
                        hipStream_t stream) {
  put_pattern_kernel<<<heap.world, kTestBlock, 0, stream>>>(heap, region_offset, words, flag_offset, epoch);
  MOE_A2A_GPU_CHECK(hipGetLastError());
}

void launch_check_pattern(const HeapView& heap, size_t region_offset, size_t words, size_t flag_offset, uint64_t epoch,
                          uint64_t timeout_ticks, SelftestResult* result, hipStream_t stream) {
  check_pattern_kernel<<<heap.world, kTestBlock, 0, stream>>>(heap, region_offset, words, flag_offset, epoch,
                                                              timeout_ticks, result);
  MOE_A2A_GPU_CHECK(hipGetLastError());
}

void launch_message_passing(const HeapView& heap, size_t mailbox_offset, int data_words, int iters, uint64_t base,
                            SyncMode mode, uint64_t timeout_ticks, SelftestResult* result, hipStream_t stream) {
  MOE_A2A_CHECK(static_cast<int>(mode) >= 0 && static_cast<int>(mode) < kNumSyncModes, "unknown sync mode");
  message_passing_kernel<<<2, kTestBlock, 0, stream>>>(heap, mailbox_offset, data_words, iters, base, mode,
                                                       timeout_ticks, result);
  MOE_A2A_GPU_CHECK(hipGetLastError());
}

}  // namespace moe_a2a
