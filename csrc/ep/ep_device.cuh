// Device helpers shared by the EP kernels: named accessors for every buffer region, error
// reporting, waiting for and publishing flags, the last-block-publishes pattern, and 16-byte
// token vectors.
#pragma once

#include <cstdint>

#include "moe_a2a/ep/kernels.h"
#include "moe_a2a/platform/device.h"
#include "moe_a2a/platform/sync.h"

#if defined(MOE_A2A_HIP)
#include <hip/hip_fp16.h>
#else
#include <cuda_fp16.h>
#endif

namespace moe_a2a {

inline constexpr int kEpBlock = 256;  // threads per block of every EP kernel
inline constexpr int kWavesPerBlock = kEpBlock / kWaveSize;

// 16 bytes = 8 bf16/fp16 or 4 fp32 token elements; rows are a multiple of 16 bytes because
// hidden % 8 == 0.
using Vec16 = uint4;

// Rows are moved in chunks: one wave moves one chunk, each lane keeping kUnroll 16-byte
// loads in flight before it stores. A chunk rather than a whole row is the unit of work so
// that few rows (small batches) still spread over every wave of the GPU, and so that the
// loads of a lane are independent (a row moved by one thread at a time is latency-bound).
inline constexpr int kUnroll = 4;
inline constexpr int kChunkVecs = kWaveSize * kUnroll;
// Rows whose per-row metadata a block stages in shared memory before moving their chunks.
inline constexpr int kRowBatch = 32;

MOE_A2A_DEVICE MOE_A2A_INLINE int chunks_per_row(int vecs) { return (vecs + kChunkVecs - 1) / kChunkVecs; }

// Loads this lane's vectors of `chunk` of a row (those past `vecs` are left alone).
MOE_A2A_DEVICE MOE_A2A_INLINE void load_chunk(const Vec16* __restrict__ row, int chunk, int vecs, Vec16 (&v)[kUnroll]) {
  const int first = chunk * kChunkVecs + lane_id();
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int i = first + u * kWaveSize;
    if (i < vecs) v[u] = row[i];
  }
}
MOE_A2A_DEVICE MOE_A2A_INLINE void store_chunk(Vec16* __restrict__ row, int chunk, int vecs, const Vec16 (&v)[kUnroll]) {
  const int first = chunk * kChunkVecs + lane_id();
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int i = first + u * kWaveSize;
    if (i < vecs) row[i] = v[u];
  }
}

// ---- buffer regions (layout documented in include/moe_a2a/ep/config.h) ----
struct EpBuffers {
  const EpContext& c;

  MOE_A2A_DEVICE uint8_t* heap_region(int owner, size_t offset) const {
    return c.heap.bases[owner] + c.ep_offset + offset;
  }
  MOE_A2A_DEVICE size_t row_index(int src, int slot) const {
    return static_cast<size_t>(src) * c.cfg.max_tokens + slot;
  }
  // On rank `owner`: the row that rank `src` dispatched into slot `slot`.
  MOE_A2A_DEVICE Vec16* recv_x(int owner, int src, int slot) const {
    return reinterpret_cast<Vec16*>(heap_region(owner, c.heap_layout.recv_x) + row_index(src, slot) * c.cfg.row_bytes());
  }
  MOE_A2A_DEVICE int32_t* recv_token(int owner, int src, int slot) const {
    return reinterpret_cast<int32_t*>(heap_region(owner, c.heap_layout.recv_token)) + row_index(src, slot);
  }
  MOE_A2A_DEVICE int32_t* recv_expert(int owner, int src, int slot) const {
    return reinterpret_cast<int32_t*>(heap_region(owner, c.heap_layout.recv_expert)) + row_index(src, slot) * c.cfg.topk;
  }
  MOE_A2A_DEVICE float* recv_weight(int owner, int src, int slot) const {
    return reinterpret_cast<float*>(heap_region(owner, c.heap_layout.recv_weight)) + row_index(src, slot) * c.cfg.topk;
  }
  // On rank `owner`: (token, k) pairs that rank `src` sent to each of owner's local experts.
  MOE_A2A_DEVICE int32_t* recv_count(int owner, int src) const {
    return reinterpret_cast<int32_t*>(heap_region(owner, c.heap_layout.recv_count)) +
           static_cast<size_t>(src) * c.cfg.experts_per_rank();
  }
  // On rank `owner`: the partial sum that expert rank `src` returned for owner's token `token`.
  MOE_A2A_DEVICE Vec16* comb_x(int owner, int src, int token) const {
    return reinterpret_cast<Vec16*>(heap_region(owner, c.heap_layout.comb_x) + row_index(src, token) * c.cfg.row_bytes());
  }
  // On rank `owner`: the gradient of owner's router weight (token, k), [max_tokens][topk].
  MOE_A2A_DEVICE float* comb_w(int owner, int token) const {
    return reinterpret_cast<float*>(heap_region(owner, c.heap_layout.comb_w)) + static_cast<size_t>(token) * c.cfg.topk;
  }
  MOE_A2A_DEVICE uint64_t* dispatch_flag(int owner, int src) const {
    return reinterpret_cast<uint64_t*>(heap_region(owner, c.heap_layout.dispatch_flag)) + src;
  }
  MOE_A2A_DEVICE uint64_t* combine_flag(int owner, int src) const {
    return reinterpret_cast<uint64_t*>(heap_region(owner, c.heap_layout.combine_flag)) + src;
  }

  // ---- local workspace ----
  template <typename T>
  MOE_A2A_DEVICE T* ws(size_t offset) const { return reinterpret_cast<T*>(c.workspace + offset); }
  MOE_A2A_DEVICE uint32_t* slot_counter() const { return ws<uint32_t>(c.ws_layout.slot_counter); }
  MOE_A2A_DEVICE uint32_t* done_counter(KernelSlot k) const { return ws<uint32_t>(c.ws_layout.done_counter) + k; }
  MOE_A2A_DEVICE uint64_t* epoch() const { return ws<uint64_t>(c.ws_layout.epoch); }
  MOE_A2A_DEVICE uint32_t* expert_count() const { return ws<uint32_t>(c.ws_layout.expert_count); }
  MOE_A2A_DEVICE uint32_t* send_count() const { return ws<uint32_t>(c.ws_layout.send_count); }
  MOE_A2A_DEVICE uint32_t* round_error() const { return ws<uint32_t>(c.ws_layout.round_error); }

  // This call's sequence number: one more than the rounds completed. Only the last block of
  // combine-recv advances it, after every block of every kernel of the call has read it.
  MOE_A2A_DEVICE uint32_t current_epoch() const { return static_cast<uint32_t>(*epoch() + 1); }
  MOE_A2A_DEVICE int vecs_per_row() const { return static_cast<int>(c.cfg.row_bytes() / sizeof(Vec16)); }
};

// Received row g (numbered over all sources) -> (source rank, slot in that source's region).
MOE_A2A_DEVICE MOE_A2A_INLINE void row_source(const int* first_row, int world, int g, int& src, int& slot) {
  src = 0;
  while (src + 1 < world && g >= first_row[src + 1]) ++src;
  slot = g - first_row[src];
}

// The contiguous share [begin, end) of `total` rows that this block handles. Received rows are
// split this way (not round-robin) so that a block can stage the metadata of consecutive rows
// in shared memory batch by batch.
struct BlockRows {
  int begin, end;
};
MOE_A2A_DEVICE MOE_A2A_INLINE BlockRows block_rows(int total) {
  const int per_block = (total + gridDim.x - 1) / gridDim.x;
  const int begin = static_cast<int>(blockIdx.x) * per_block;
  return BlockRows{begin, min(total, begin + per_block)};
}

// Records the first error of the call (later ones are dropped) and marks the round as failed
// so the flags this rank sends carry kFlagErrorBit.
MOE_A2A_DEVICE inline void report_error(const EpContext& c, ErrorCode code, int peer, int detail, int64_t index,
                                        uint64_t expected, uint64_t seen) {
  EpBuffers b{c};
  *b.round_error() = 1;
  ErrorRecord* e = c.error;
  if (atomic_cas_sys(&e->claimed, 0u, 1u) != 0u) return;
  e->peer = peer;
  e->detail = detail;
  e->index = index;
  e->expected = expected;
  e->seen = seen;
  st_release_sys(&e->code, static_cast<uint32_t>(code));
}

// Every block calls this once at its end. Returns true in exactly one block, the last to
// arrive, after all other blocks' memory operations (local and remote) are ordered before
// it: each block's thread 0 fences at system scope before counting itself done, so the
// last block may publish flags that cover every block's stores. Resets the counter.
// Must be called by all threads of the block (it synchronises the block).
MOE_A2A_DEVICE inline bool last_block_done(uint32_t* counter) {
  __shared__ bool is_last;
  __syncthreads();
  if (threadIdx.x == 0) {
    fence_acq_rel_sys();
    const uint32_t prior = atomic_add_relaxed_gpu(counter, 1u);
    is_last = prior == gridDim.x - 1;
    if (is_last) {
      fence_acq_rel_sys();  // acquire side: see what the other blocks did before counting
      *counter = 0;
    }
  }
  __syncthreads();
  return is_last;
}

// A dispatch's received-row prefix sums (RecvRoute::rows) into shared memory, for row_source().
// The route came back from the caller: one that no dispatch could have written (a source with
// more than max_tokens rows) is reported and read as "no rows", so it never addresses outside
// a buffer.
MOE_A2A_DEVICE inline void load_route_rows(const EpContext& c, const RecvRoute& route, int* first_row) {
  const int world = c.cfg.world;
  if (threadIdx.x <= world) first_row[threadIdx.x] = route.rows[threadIdx.x];
  __syncthreads();
  __shared__ bool bad;
  if (threadIdx.x == 0) {
    bad = first_row[0] != 0;
    for (int r = 0; r < world; ++r) {
      const int n = first_row[r + 1] - first_row[r];
      bad = bad || n < 0 || n > c.cfg.max_tokens;
    }
    if (bad && blockIdx.x == 0) report_error(c, ErrorCode::kBadRoute, -1, -1, -1, 0, 0);
  }
  __syncthreads();
  if (bad && threadIdx.x <= world) first_row[threadIdx.x] = 0;
  __syncthreads();
}

// Waits until every source's flag of this call (flags[src], on this rank) has arrived: thread
// src waits for source src, bounded by the timeout. A timeout is reported as `timeout_code`
// with `waiter` (the kernel that waited) as detail, an error bit in a flag as kPeerError. If `payload` is given, payload[src] gets the flag's count
// (0 for a source that timed out). Returns false if any source timed out; a block that gets
// false must leave without touching any buffer (the engine is failed from then on).
// Must be called by all threads.
MOE_A2A_DEVICE inline bool wait_for_sources(const EpContext& c, const uint64_t* flags, uint32_t epoch,
                                            ErrorCode timeout_code, KernelSlot waiter, int* payload = nullptr) {
  __shared__ bool ok;
  if (threadIdx.x == 0) ok = true;
  __syncthreads();
  if (threadIdx.x < c.cfg.world) {
    const int src = threadIdx.x;
    uint64_t seen = 0;
    const uint64_t target = make_flag(epoch, 0);
    const bool arrived = wait_until_at_least_sys(flags + src, target, c.timeout_ticks, &seen);
    MOE_A2A_PROFILE(profiler_arrivals()[src] = wall_clock());
    if (!arrived) {
      report_error(c, timeout_code, src, waiter, src, target, seen);
      ok = false;
      if (payload != nullptr) payload[src] = 0;
    } else {
      const uint32_t p = flag_payload(seen);
      if (p & kFlagErrorBit) report_error(c, ErrorCode::kPeerError, src, -1, -1, 0, 0);
      if (payload != nullptr) payload[src] = static_cast<int>(min(p & kFlagCountMask, static_cast<uint32_t>(c.cfg.max_tokens)));
    }
  }
  __syncthreads();
  return ok;
}

// The error bit of every flag this rank publishes in the current call: set once this rank
// hit an error, so the receivers fail too.
MOE_A2A_DEVICE inline uint32_t round_error_bit(const EpBuffers& b) {
  return ld_relaxed_sys(b.round_error()) != 0 ? kFlagErrorBit : 0u;
}

// Tells every rank that this rank's half of the round is in place: combine flag (epoch, error
// bit). Called by the block that last_block_done() picked, so every block's stores are covered.
MOE_A2A_DEVICE inline void publish_combine_flags(const EpBuffers& b, uint32_t epoch) {
  if (threadIdx.x < b.c.cfg.world) {
    st_release_sys(b.combine_flag(threadIdx.x, b.c.cfg.rank), make_flag(epoch, round_error_bit(b)));
  }
}

// End of a round on this rank, by the last block of its last kernel: advance the epoch and
// clear the error mark for the next round.
MOE_A2A_DEVICE inline void end_round(const EpBuffers& b) {
  if (threadIdx.x == 0) {
    *b.epoch() = *b.epoch() + 1;
    *b.round_error() = 0;
  }
}

// ---- token element conversions (bf16 by bit manipulation, fp16 by intrinsics) ----
MOE_A2A_DEVICE MOE_A2A_INLINE float bf16_bits_to_float(uint16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}
MOE_A2A_DEVICE MOE_A2A_INLINE uint16_t float_to_bf16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>((u + rounding) >> 16);
}

// Token elements per 16-byte vector.
template <TokenType kType>
inline constexpr int kVecElems = kType == TokenType::kFloat32 ? 4 : 8;

template <TokenType kType>
MOE_A2A_DEVICE MOE_A2A_INLINE float to_float(uint16_t bits) {
  if constexpr (kType == TokenType::kBFloat16) {
    return bf16_bits_to_float(bits);
  } else {
    return __half2float(__ushort_as_half(bits));
  }
}
template <TokenType kType>
MOE_A2A_DEVICE MOE_A2A_INLINE uint16_t from_float(float f) {
  if constexpr (kType == TokenType::kBFloat16) {
    return float_to_bf16_bits(f);
  } else {
    return __half_as_ushort(__float2half_rn(f));
  }
}

// The kVecElems<kType> elements of v as floats, in memory order.
template <TokenType kType>
MOE_A2A_DEVICE MOE_A2A_INLINE void unpack_vec(const Vec16& v, float (&f)[8]) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (kType == TokenType::kFloat32) {
      f[i] = __uint_as_float(words[i]);
    } else {
      f[2 * i] = to_float<kType>(static_cast<uint16_t>(words[i] & 0xffffu));
      f[2 * i + 1] = to_float<kType>(static_cast<uint16_t>(words[i] >> 16));
    }
  }
}

// acc += w * v element-wise (acc[0 .. kVecElems - 1]), fp32 fused multiply-add in a fixed order.
template <TokenType kType>
MOE_A2A_DEVICE MOE_A2A_INLINE void fma_vec(float (&acc)[8], float w, const Vec16& v) {
  float f[8];
  unpack_vec<kType>(v, f);
#pragma unroll
  for (int i = 0; i < kVecElems<kType>; ++i) acc[i] = fmaf(w, f[i], acc[i]);
}

// Sum of a[i] * b[i] over the vector's elements, in fp32.
template <TokenType kType>
MOE_A2A_DEVICE MOE_A2A_INLINE float dot_vec(const Vec16& a, const Vec16& b) {
  float fa[8], fb[8];
  unpack_vec<kType>(a, fa);
  unpack_vec<kType>(b, fb);
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < kVecElems<kType>; ++i) s = fmaf(fa[i], fb[i], s);
  return s;
}

// acc[0 .. kVecElems - 1] rounded to the token type, as one vector.
template <TokenType kType>
MOE_A2A_DEVICE MOE_A2A_INLINE Vec16 pack_vec(const float (&acc)[8]) {
  uint32_t words[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (kType == TokenType::kFloat32) {
      words[i] = __float_as_uint(acc[i]);
    } else {
      words[i] = static_cast<uint32_t>(from_float<kType>(acc[2 * i])) |
                 (static_cast<uint32_t>(from_float<kType>(acc[2 * i + 1])) << 16);
    }
  }
  return Vec16{words[0], words[1], words[2], words[3]};
}

// Dispatches a kernel template on the runtime token type.
#define MOE_A2A_DISPATCH_TOKEN_TYPE(type, K, ...)                   \
  do {                                                              \
    if ((type) == ::moe_a2a::TokenType::kBFloat16) {                \
      constexpr auto K = ::moe_a2a::TokenType::kBFloat16;           \
      __VA_ARGS__;                                                  \
    } else if ((type) == ::moe_a2a::TokenType::kFloat16) {          \
      constexpr auto K = ::moe_a2a::TokenType::kFloat16;            \
      __VA_ARGS__;                                                  \
    } else {                                                        \
      constexpr auto K = ::moe_a2a::TokenType::kFloat32;            \
      __VA_ARGS__;                                                  \
    }                                                               \
  } while (0)

}  // namespace moe_a2a
