// Rows sent as flagged words: combine's partial sums for a rank with few tokens
// (EpConfig::flagged_partials); and single flagged words: dispatch's counts (recv_count) and the
// pairs' weight gradients (comb_w) of the backward of combine, or of the backward of dispatch with the weights at the
// experts. Each 4 bytes of a row travel in one 8-byte word next to a 32-bit
// flag that names the round, written with one relaxed system-scope store (8 bytes are one
// single-copy-atomic access on both vendors): a reader that finds the round's flag has the data,
// with no fence and no signal. Why, and why nothing stale passes: docs/design/protocol.md,
// "Flagged partial sums" and "Why nothing is overwritten too early".
//
// Layout of a flagged row: its 16-byte vectors (4 data words each) in blocks of kWaveSize
// vectors, one per lane of a wave; vector `base + l` of the block that starts at `base` keeps
// data word j at word `4 * base + j * kWaveSize + l`, so each 8-byte store or load of a wave
// covers kWaveSize consecutive words.
//
// The reader of a row or a weight gradient clears every word it consumed (0 is no round's flag),
// so a word it looks at holds 0 or this round's data, however many rounds went by. The counts
// are rewritten in every dispatch instead, so a count word holds the last dispatch's flag until
// this one's lands (docs/design/protocol.md, "Flagged counts").
#pragma once

#include "ep_device.cuh"

namespace moe_a2a {

// The flag of round `epoch`: its low 31 bits, and bit 31 so that no round's flag is 0.
MOE_A2A_DEVICE MOE_A2A_INLINE uint32_t round_flag(uint64_t epoch) { return static_cast<uint32_t>(epoch) | 0x80000000u; }

// A flagged word: 32 data bits below the round's flag.
MOE_A2A_DEVICE MOE_A2A_INLINE uint64_t with_round_flag(uint32_t data, uint32_t flag) {
  return (static_cast<uint64_t>(flag) << 32) | data;
}
// The flag a flagged word carries (0: never written, or cleared).
MOE_A2A_DEVICE MOE_A2A_INLINE uint32_t flag_of(uint64_t word) { return static_cast<uint32_t>(word >> 32); }

// Waits until the flagged word *w carries `flag`, then gives its data bits and clears it. False
// after `timeout_ticks` of wall_clock(), or once `*give_up` is set (spin_bounded).
MOE_A2A_DEVICE inline bool await_flagged_word(uint64_t* w, uint32_t flag, uint32_t* data, uint64_t timeout_ticks,
                                              const uint64_t* give_up) {
  uint64_t v = 0;
  if (!spin_bounded([&] { return flag_of(v = ld_relaxed_sys(w)) == flag; }, timeout_ticks, give_up)) {
    return false;
  }
  *data = static_cast<uint32_t>(v);
  st_relaxed_sys(w, uint64_t{0});
  return true;
}

// The token side of a round that carries each pair's weight gradient back as a comb_w word (the
// backward of combine, step 3; the backward of dispatch with the weights at the experts): the
// gradients of every pair of this rank's tokens [tokens.begin, tokens.end) into grad_topk_weights,
// 0 for an unused slot (no expert answers it), else its word once it carries `flag`. Every thread
// of the block, a pair at a time; false (this thread) after a timeout, which the caller reports.
MOE_A2A_DEVICE MOE_A2A_INLINE bool await_weight_grads(const EpBuffers& b, const SendRoute& route,
                                                      float* grad_topk_weights, TokenRange tokens, uint32_t flag) {
  const int me = b.c.cfg.rank, topk = b.c.cfg.topk;
  for (int i = tokens.begin * topk + static_cast<int>(threadIdx.x); i < tokens.end * topk;
       i += static_cast<int>(blockDim.x)) {
    const auto [t, k] = pair_of(b.c, i);
    uint32_t grad = 0;
    if (!slot_unused(route.dest_mask[t], k) &&
        !await_flagged_word(b.comb_w(me, t) + k, flag, &grad, b.c.timeout_ticks, b.timed_out())) {
      return false;
    }
    grad_topk_weights[i] = __uint_as_float(grad);
  }
  return true;
}

// Block u's kWaveSize vectors lie as 4 words a lane, word j of every lane together, so their words
// span the whole block even where the row ends inside it: rows are padded to kFlaggedRowAlign,
// which must hold whole blocks of the widest wave.
static_assert(kFlaggedRowAlign % (kWaveSize * sizeof(Vec16)) == 0, "a flagged row holds whole blocks of a wave");

// Word j of the vector this lane moves in block `u` of `chunk`, counted from the row's start.
MOE_A2A_DEVICE MOE_A2A_INLINE size_t flagged_word(int chunk, int u, int j) {
  const int base = chunk * kChunkVecs + u * kWaveSize;
  return 4 * static_cast<size_t>(base) + j * kWaveSize + lane_id();
}

// Stores this lane's vectors of `chunk` (those before `vecs`) into a flagged row.
MOE_A2A_DEVICE MOE_A2A_INLINE void store_chunk_flagged(uint64_t* row, int chunk, int vecs, const Vec16 (&v)[kUnroll],
                                                       uint32_t flag) {
  const int first = chunk * kChunkVecs + lane_id();
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    if (first + u * kWaveSize >= vecs) continue;
    const uint32_t words[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
#pragma unroll
    for (int j = 0; j < 4; ++j) st_relaxed_sys(row + flagged_word(chunk, u, j), with_round_flag(words[j], flag));
  }
}

// Waits until this lane's words of `chunk` of a flagged row all carry `flag`, then hands their
// data to take(u, vector), u ascending, and clears them. Every load of a look is issued before
// any is tested, so a look costs one memory latency. One row at a time, and the code kept small:
// the kernels' critical paths run cold in the instruction cache (docs/design/protocol.md,
// "Flagged partial sums"). False after `timeout_ticks` of wall_clock(), or once `*give_up` is set
// (spin_bounded).
template <typename Take>
MOE_A2A_DEVICE inline bool await_chunk_flagged(uint64_t* row, int chunk, int vecs, uint32_t flag, Take take,
                                               uint64_t timeout_ticks, const uint64_t* give_up) {
  const int first = chunk * kChunkVecs + lane_id();
  uint64_t w[kUnroll][4];
  const auto look = [&] {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        w[u][j] = first + u * kWaveSize < vecs ? ld_relaxed_sys(row + flagged_word(chunk, u, j)) : uint64_t{flag} << 32;
      }
    }
    bool all = true;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int j = 0; j < 4; ++j) all &= flag_of(w[u][j]) == flag;
    }
    return all;
  };
  if (!spin_bounded(look, timeout_ticks, give_up)) return false;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    if (first + u * kWaveSize >= vecs) continue;
    take(u, Vec16{static_cast<uint32_t>(w[u][0]), static_cast<uint32_t>(w[u][1]), static_cast<uint32_t>(w[u][2]),
                  static_cast<uint32_t>(w[u][3])});
#pragma unroll
    for (int j = 0; j < 4; ++j) st_relaxed_sys(row + flagged_word(chunk, u, j), uint64_t{0});
  }
  return true;
}

}  // namespace moe_a2a
