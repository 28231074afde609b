// Dispatch's send half: the counting block's pairs per expert (send_counts, count_pairs), then each
// sending block's token groups (send_group: routing, slots, metadata, the rows, the group's release).
// docs/design/protocol.md, "Dispatch" and "Token groups". Part of dispatch.cu, included by it only.
#pragma once

#include "dispatch_shared.cuh"
#include "flagged_rows.cuh"
#include "fp8_rows.cuh"

namespace moe_a2a {
namespace {  // part of dispatch.cu, its only includer: internal linkage as there

// From this many ids on, the counting block (send_counts) reads them 16 bytes at a time
// (count_wide). At 4096 tokens of top-8 (32768 ids) it took about 28 us with one id a load, 2 x
// H100, while the receivers waited for its counts (session 10's traces), and a quantizing dispatch
// that places its own rows waits for them in every block (session 11's): 311.1 -> 299.5 us eager
// dispatch in bf16, 225.5 -> 211.0 in fp8. Below it, and at count_pairs' other sites (a block
// numbering the pairs before its group), the one-id loop is kept: the wide reads there too cost the
// small challenge shapes 0.4-0.7 us of graph d+c (session 11, call 6).
inline constexpr int kWideCountIds = 8192;

// Id j of a 16-byte vector of ids of type IdT (int32_t or int64_t), widened.
template <typename IdT>
MOE_A2A_DEVICE MOE_A2A_INLINE int64_t id_in_vec(const Vec16& v, int j) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  if constexpr (sizeof(IdT) == 4) {
    return static_cast<int32_t>(w[j]);
  } else {
    return static_cast<int64_t>(static_cast<uint64_t>(w[2 * j + 1]) << 32 | w[2 * j]);
  }
}

// count_pairs for ids [first, end) of type IdT: 16-byte loads, kInFlight of them in flight a thread;
// the ids before the first 16-byte boundary and after the last one, a thread each. Not inlined:
// two id types, and the small counts never call it.
template <typename IdT>
MOE_A2A_DEVICE MOE_A2A_NOINLINE void count_wide(const IdT* ids, int num_experts, uint32_t* pairs, int first, int end,
                                                uint32_t add) {
  constexpr int kPerVec = static_cast<int>(sizeof(Vec16) / sizeof(IdT));
  constexpr int kInFlight = 8;  // vectors loaded before the first is counted
  const auto count = [&](int64_t e) {
    if (e >= 0 && e < num_experts) atomic_add_relaxed_block(pairs + e, add);
  };
  const size_t misaligned = reinterpret_cast<uintptr_t>(ids + first) % sizeof(Vec16);
  const int head = min(end - first, static_cast<int>((sizeof(Vec16) - misaligned) % sizeof(Vec16) / sizeof(IdT)));
  if (static_cast<int>(threadIdx.x) < head) count(ids[first + threadIdx.x]);
  const int body = first + head;
  const int vecs = (end - body) / kPerVec;
  const Vec16* v = reinterpret_cast<const Vec16*>(ids + body);
  for (int base = threadIdx.x; base < vecs; base += kInFlight * blockDim.x) {
    Vec16 w[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int i = base + u * blockDim.x;
      if (i < vecs) w[u] = v[i];
    }
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      if (base + u * static_cast<int>(blockDim.x) >= vecs) break;
#pragma unroll
      for (int j = 0; j < kPerVec; ++j) count(id_in_vec<IdT>(w[u], j));
    }
  }
  const int tail = body + vecs * kPerVec + threadIdx.x;
  if (tail < end) count(ids[tail]);
}

// Adds `add` (1, or ~0u to take them off) to `pairs` (per global expert, in shared memory) for
// each (token, k) pair of topk_idx entries [first, end). A bad id (neither an expert nor
// kMaskedSlot) is counted nowhere, as it is sent nowhere; the routing of its group reports it.
MOE_A2A_DEVICE void count_pairs(const EpConfig& cfg, const DispatchArgs& a, uint32_t* pairs, int first, int end,
                                uint32_t add = 1u) {
  constexpr int kInFlight = 8;  // ids loaded before the first is counted
  for (int base = first + threadIdx.x; base < end; base += kInFlight * blockDim.x) {
    int64_t ids[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int i = base + u * blockDim.x;
      ids[u] = i < end ? read_expert(a, i) : 0;
    }
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      if (base + u * static_cast<int>(blockDim.x) >= end) break;
      if (valid_expert(cfg, ids[u])) atomic_add_relaxed_block(pairs + ids[u], add);
    }
  }
}

// The round's counts to every rank: pairs[e] (per global expert) into its owner's recv_count, and
// the token count, with the error bit where this rank's round failed, as each rank's token word. A
// bad id does not set it here: the peers learn of it from its group's signal, after the routing has
// recorded it (protocol.md, "Errors travel in signals").
MOE_A2A_DEVICE void publish_counts(const EpBuffers& b, const DispatchArgs& a, const uint32_t* pairs, uint64_t epoch,
                                   ProfilerTrack& prof) {
  const EpConfig& cfg = b.c.cfg;
  const int tokens = a.route.num_tokens;
  // The counts go as flagged words, each on its own (protocol.md, "Flagged counts"): a signal's
  // release after them waited for the remote stores' acknowledgements, 2.1-2.3 us on 2 x H100 at
  // every shape, and on a busy link the signal then landed 2.4-2.8 us later, behind the rows
  // (session 24's traces of profiler stage dispatch.counts_out).
  ProfilerSpan out_span(prof, ProfilerEvent::kDispatchCountsOut, tokens);
  const int local = experts_per_rank(b.c);
  const uint32_t flag = round_flag(epoch);
  for (int e = threadIdx.x; e < cfg.num_experts; e += blockDim.x) {
    const int r = owner_rank_of(b.c, e);
    st_relaxed_sys(b.recv_count(r, cfg.rank) + (e - r * local), with_round_flag(pairs[e], flag));
  }
  if (threadIdx.x < cfg.world) {
    st_relaxed_sys(b.recv_count(threadIdx.x, cfg.rank) + local,
                   with_round_flag(static_cast<uint32_t>(tokens) | round_error_bit(b, epoch), flag));
  }
}

// The counting block: (token, k) pairs per local expert of every rank, over all tokens, and the
// token count, to every rank. Bad ids are left out here as they are from the rows.
MOE_A2A_DEVICE void send_counts(const EpBuffers& b, const DispatchArgs& a, DispatchShared& sh, uint64_t epoch,
                                ProfilerTrack& prof) {
  const EpConfig& cfg = b.c.cfg;
  for (int e = threadIdx.x; e < cfg.num_experts; e += blockDim.x) sh.pairs[e] = 0;
  __syncthreads();
  const int ids = a.route.num_tokens * cfg.topk;
  if (ids < kWideCountIds)
    count_pairs(cfg, a, sh.pairs, 0, ids);
  else if (a.topk_idx_is_int64)
    count_wide(static_cast<const int64_t*>(a.topk_idx), cfg.num_experts, sh.pairs, 0, ids, 1u);
  else
    count_wide(static_cast<const int32_t*>(a.topk_idx), cfg.num_experts, sh.pairs, 0, ids, 1u);
  __syncthreads();
  publish_counts(b, a, sh.pairs, epoch, prof);
}

// send_group's numbered_to where every pair of the block has its rank already (reserve_pairs).
inline constexpr int kAllNumbered = INT32_MAX;

// Pairs numbered by reservation, in a launch that quantizes and whose blocks all wait for the counts
// before they send (dispatch_kernel's own_placed), instead of send_counts and each group's count of
// the pairs before it. Each sending block counts the pairs of its own groups per expert and reserves
// that many ranks of each expert with one atomic add to the workspace's pair_totals: the total
// before the add is its first rank, sh.numbered from then on (write_metadata numbers its pairs from
// there, group after group: unique, and order inside an expert is free). The block that arrives
// last (reserved_blocks) finds every total: it publishes the counts and clears both words for the
// next round. One block reading every id took about 11 us at 4096 tokens of top-8 while a quantizing
// dispatch's blocks waited for it, and the blocks with the last groups spent up to 18 us more
// counting the pairs before theirs (session 30's traces): protocol.md, "Dispatch", which also
// says why a split launch, whose senders do not wait for the counts, keeps the counting block.
MOE_A2A_DEVICE void reserve_pairs(const EpBuffers& b, const DispatchArgs& a, DispatchShared& sh, HalfShare send,
                                  int my_groups, uint64_t epoch, ProfilerTrack& prof) {
  const EpConfig& cfg = b.c.cfg;
  const int tokens = a.route.num_tokens;
  for (int e = threadIdx.x; e < cfg.num_experts; e += blockDim.x) sh.pairs[e] = 0;
  __syncthreads();
  for (int g = send.first; g < my_groups; g += send.stride) {
    const TokenRange group = cfg.token_group(tokens, g);
    count_pairs(cfg, a, sh.pairs, group.begin * cfg.topk, group.end * cfg.topk);
  }
  __syncthreads();
  uint32_t* totals = b.pair_totals();
  for (int e = threadIdx.x; e < cfg.num_experts; e += blockDim.x)
    sh.numbered[e] = sh.pairs[e] == 0 ? 0u : atomic_add_relaxed_gpu(totals + e, sh.pairs[e]);
  __syncthreads();
  if (threadIdx.x == 0) {
    fence_acq_rel_gpu();  // the block's adds (the barrier above) before its arrival
    sh.reserved_last = atomic_add_relaxed_gpu(b.reserved_blocks(), 1u) + 1u == static_cast<uint32_t>(send.stride);
    if (sh.reserved_last) fence_acq_rel_gpu();  // every block's adds before the totals are read
  }
  __syncthreads();
  if (!sh.reserved_last) return;
  for (int e = threadIdx.x; e < cfg.num_experts; e += blockDim.x) {
    sh.pairs[e] = ld_relaxed_sys(totals + e);
    totals[e] = 0u;  // the next round's adds are in a later launch
  }
  if (threadIdx.x == 0) *b.reserved_blocks() = 0u;
  __syncthreads();
  publish_counts(b, a, sh.pairs, epoch, prof);
}

// One token group being sent: its tokens and where its (token, k) pairs start in topk_idx.
struct SendingGroup {
  int g;
  TokenRange tokens;
  int n;              // tokens (<= kEpBlock: validate() checks max_group_tokens)
  size_t first_pair;  // index of its first (token, k) in topk_idx and topk_weights
};

// Step 1 of send_group. Routing: which ranks each token goes to, one thread per (token, k): every
// id of the group is in flight at once, and the code is a few instructions instead of one copy per
// k of a loop unrolled over kMaxTopk (16), each with an inlined error report. A bad id is reported
// and its (token, k) pair dropped, never sent anywhere. `first_id`: this thread's first pair's id.
MOE_A2A_DEVICE MOE_A2A_INLINE void route_group(const EpBuffers& b, const DispatchArgs& a, DispatchShared& sh,
                                               const SendingGroup& grp, int64_t first_id) {
  const EpConfig& cfg = b.c.cfg;
  for (int i = threadIdx.x; i < grp.n; i += blockDim.x) sh.mask[i] = 0u;
  __syncthreads();
  for (int j = threadIdx.x; j < grp.n * cfg.topk; j += blockDim.x) {
    const int64_t e = j == static_cast<int>(threadIdx.x) ? first_id : read_expert(a, grp.first_pair + j);
    const PairIndex p = pair_of(b.c, j);
    if (e == kMaskedSlot) {  // an unused slot: no row, its weight ignored (and given no gradient)
      atomic_or_relaxed_block(sh.mask + p.token, 1u << (kUnusedSlotBit + p.k));
      continue;
    }
    if (!valid_expert(cfg, e)) {
      const int32_t shown = e < INT32_MIN ? INT32_MIN : (e > INT32_MAX ? INT32_MAX : static_cast<int32_t>(e));
      report_error(b.c, ErrorCode::kBadExpertId, -1, shown, grp.tokens.begin + p.token, cfg.num_experts, 0);
      continue;
    }
    atomic_or_relaxed_block(sh.mask + p.token, 1u << owner_rank_of(b.c, static_cast<int32_t>(e)));
  }
  __syncthreads();
  // combine sums exactly these ranks' partials (the unused slots' bits are for its backward)
  for (int i = threadIdx.x; i < grp.n; i += blockDim.x)
    a.route.dest_mask[grp.tokens.begin + i] = static_cast<int32_t>(sh.mask[i]);
}

// Step 2 of send_group. Slots: the group's rows for each destination take its first slots, in
// token order (wave 0; the caller synchronises the block).
MOE_A2A_DEVICE MOE_A2A_INLINE void number_slots(const EpConfig& cfg, DispatchShared& sh, const SendingGroup& grp) {
  if (wave_id() != 0) return;
  int running[kMaxWorld] = {};
  for (int base = 0; base < grp.n; base += kWaveSize) {
    const int i = base + lane_id();
    const uint32_t mask = i < grp.n ? sh.mask[i] : 0u;
#pragma unroll
    for (int r = 0; r < kMaxWorld; ++r) {
      if (r >= cfg.world) break;
      const bool to_r = (mask >> r) & 1u;
      const LaneMask bits = wave_ballot(to_r);
      if (to_r) sh.slot[i][r] = grp.tokens.begin + running[r] + popcount(bits & lanes_below());
      running[r] += popcount(bits);
    }
  }
#pragma unroll
  for (int r = 0; r < kMaxWorld; ++r) {
    if (r < cfg.world && lane_id() == r) sh.rows[r] = running[r];
  }
}

// Step 3 of send_group. Metadata: one thread per (token, k), as in step 1: for each destination of
// the token, where the pair goes there (its local expert and its rank on the expert's rank,
// kNoLocalExpert on the others) and the weight; the source token once per row. The rank is one
// shared-memory atomic on the pairs counted so far (step 0 finished before the routing's barriers).
// With `own_placed` this rank's own pairs get no metadata in recv_x's regions: what the receive
// half writes for a row it places is written here (place_pair), and their rows of expert_x go to
// sh.own_pos.
MOE_A2A_DEVICE MOE_A2A_INLINE void write_metadata(const EpBuffers& b, const DispatchArgs& a, DispatchShared& sh,
                                                  const SendingGroup& grp, int64_t first_id, float first_weight,
                                                  bool own_placed) {
  const EpConfig& cfg = b.c.cfg;
  const int me = cfg.rank;
  for (int j = threadIdx.x; j < grp.n * cfg.topk; j += blockDim.x) {
    const auto [i, k] = pair_of(b.c, j);
    const int t = grp.tokens.begin + i;
    const bool first = j == static_cast<int>(threadIdx.x);
    const int64_t e = first ? first_id : read_expert(a, grp.first_pair + j);
    const float w = first ? first_weight : a.topk_weights[grp.first_pair + j];
    const uint32_t mask = sh.mask[i];
    const int owner = valid_expert(cfg, e) ? owner_rank_of(b.c, static_cast<int32_t>(e)) : -1;
    const int32_t place = owner < 0 ? kNoLocalExpert
                                    : place_word(static_cast<int32_t>(e) - owner * experts_per_rank(b.c),
                                                 static_cast<int32_t>(atomic_add_relaxed_block(sh.numbered + e, 1u)));
    for (int r = 0; r < cfg.world; ++r) {
      if (!((mask >> r) & 1u)) continue;
      const int s = sh.slot[i][r];
      if (r == me && own_placed) {
        sh.own_pos[j] =
            place_pair(b, a, sh, me, b.row_index(me, s), t, k, r == owner ? place : kNoLocalExpert, w, true);
        continue;
      }
      b.recv_expert(r, me, s)[k] = r == owner ? place : kNoLocalExpert;
      b.recv_weight(r, me, s)[k] = w;
      if (k == 0) *b.recv_token(r, me, s) = t;
    }
  }
}

// Step 4 of send_group, one (token, chunk) task: the chunk `v`, loaded (and quantized) once, to
// every destination rank of the token in `mask`, and with `own` (own_placed) to each row of
// expert_x of the token's own pairs (sh.own_pos).
template <SendCodec kCodec, Fp8Format kFmt>
MOE_A2A_DEVICE MOE_A2A_INLINE void send_chunk(const EpBuffers& b, const DispatchArgs& a, const DispatchShared& sh,
                                              const SendingGroup& grp, int i, int chunk, int vecs, uint32_t mask,
                                              bool own, const Vec16 (&v)[kUnroll]) {
  const EpConfig& cfg = b.c.cfg;
  const int me = cfg.rank;
  if constexpr (kCodec != SendCodec::kCopy) {
    constexpr TokenType kType = kQuantizedFrom<kCodec>;
    Fp8Chunk q;
    quantize_chunk<kType, kFmt>(v, chunk, vecs, cfg.fp8_pow2_scales != 0, q);
    // Destinations d < world: rank d's recv_x; then, with `own`, the rows of the token's k = d - world.
    // One loop, so that the stores are one site of code (a quantizing kernel inlines send_group twice).
    const int dests = cfg.world + (own ? cfg.topk : 0);
    for (int d = 0; d < dests; ++d) {
      uint8_t* bytes;
      float* scales;
      if (d < cfg.world) {
        if (!((mask >> d) & 1u)) continue;
        void* wire = b.recv_x(d, me, sh.slot[i][d]);
        bytes = static_cast<uint8_t*>(wire);
        scales = wire_scales(wire, cfg.hidden);
      } else {
        const int at = sh.own_pos[i * cfg.topk + d - cfg.world];
        if (at < 0) continue;
        bytes = static_cast<uint8_t*>(a.expert_x) + static_cast<size_t>(at) * cfg.hidden;
        scales = a.expert_x_scale + static_cast<size_t>(at) * cfg.scale_blocks();
      }
      store_fp8_chunk<kType>(bytes, scales, chunk, vecs, q);
    }
  } else {
    for (int r = 0; r < cfg.world; ++r) {
      if ((mask >> r) & 1u) store_chunk(b.recv_x(r, me, sh.slot[i][r]), chunk, vecs, v);
    }
    for (int k = 0; own && k < cfg.topk; ++k) {  // plain rows only (own_placed)
      const int at = sh.own_pos[i * cfg.topk + k];
      if (at >= 0) store_chunk(static_cast<Vec16*>(a.expert_x) + static_cast<size_t>(at) * vecs, chunk, vecs, v);
    }
    if (cfg.fp8_rows() && chunk == 0) {  // quantized by the caller: its scales follow the bytes
      const float* scales = a.x_scale + static_cast<size_t>(grp.tokens.begin + i) * cfg.scale_blocks();
      for (int j = lane_id(); j < cfg.scale_blocks(); j += kWaveSize) {
        const float s = scales[j];
        for (int r = 0; r < cfg.world; ++r) {
          if ((mask >> r) & 1u) wire_scales(b.recv_x(r, me, sh.slot[i][r]), cfg.hidden)[j] = s;
        }
      }
    }
  }
}

// Token group `g` to every rank. `numbered_to`: the tokens [0, numbered_to) whose pairs
// sh.numbered holds (this block's previous group's end; 0 and zeros before its first;
// kAllNumbered where the block reserved its pairs' ranks, reserve_pairs).
// With `own_direct` (dispatch_kernel) this rank's own rows stay in x: its signal goes out as soon
// as the group's metadata is stored, before the rows to the peers.
// With `own_placed` (dispatch_kernel; the segments are laid out already) this rank's own rows go
// into expert_x here, and no signal of the group goes to this rank.
template <SendCodec kCodec, Fp8Format kFmt>
MOE_A2A_DEVICE void send_group(const EpBuffers& b, const DispatchArgs& a, DispatchShared& sh, int g, int& numbered_to,
                               bool own_direct, bool own_placed, uint64_t epoch, ProfilerTrack& prof) {
  const EpConfig& cfg = b.c.cfg;
  const TokenRange tokens = cfg.token_group(a.route.num_tokens, g);
  const SendingGroup grp{g, tokens, tokens.end - tokens.begin, static_cast<size_t>(tokens.begin) * cfg.topk};
  const uint64_t route_start = prof.now();
  // Rows move as tasks (token, chunk) over the block's waves. Which chunk a wave takes first
  // does not depend on the routing, so it is loaded before the routing and is in registers when
  // step 4 needs it. The last wave takes the first task: the metadata (step 3) is one thread per
  // (token, k), so at a few tokens only the first waves write it, and they take the rows' last
  // tasks, or none (one token of 7 chunks: waves 7..1 send while wave 0 writes the metadata).
  const InputRows in = input_rows(cfg, a);
  const int chunks = chunks_per_row(in.vecs);
  const int first_task = kWavesPerBlock - 1 - wave_id();
  const auto x_row = [&](int i) {
    return reinterpret_cast<const Vec16*>(static_cast<const uint8_t*>(a.x) +
                                          static_cast<size_t>(tokens.begin + i) * in.row_bytes);
  };

  // A thread's first (token, k) of the group (steps 1 and 3): its id and weight are loaded now, so
  // that they and the ids of step 0 are in flight together, and stay in registers until step 3.
  const bool has_pair = static_cast<int>(threadIdx.x) < grp.n * cfg.topk;
  const int64_t first_id = has_pair ? read_expert(a, grp.first_pair + threadIdx.x) : 0;
  const float first_weight = has_pair ? a.topk_weights[grp.first_pair + threadIdx.x] : 0.0f;

  // 0. The group's pairs are numbered after those of the tokens before it, which other blocks
  //    send: count them (each block reads every id before its last group once in all; none at
  //    one token a group and block). Bad ids are reported by the routing of their own group.
  if (numbered_to < tokens.begin) count_pairs(cfg, a, sh.numbered, numbered_to * cfg.topk, tokens.begin * cfg.topk);
  numbered_to = max(numbered_to, tokens.end);
  // The first chunks are loaded after the count, not before it: every block loads its chunks at
  // once, from HBM, and the count's ids queued behind them (the routing took 2-3.5 us where a
  // count came first, 1.1 us where none did; 2 x H100, session 24: graph d+c 40.5 -> 40.0 us at
  // E256-K8-H7168-T256 drawn; protocol.md, "Dispatch").
  Vec16 first_chunk[kUnroll];
  if (first_task < grp.n * chunks) load_chunk(x_row(first_task / chunks), first_task % chunks, in.vecs, first_chunk);

  route_group(b, a, sh, grp, first_id);  // 1.
  number_slots(cfg, sh, grp);            // 2.
  __syncthreads();
  if (wave_id() == 0) prof.record(ProfilerEvent::kDispatchRoute, route_start, g);
  const uint64_t meta_start = prof.now();
  write_metadata(b, a, sh, grp, first_id, first_weight, own_placed);  // 3.
  if (wave_id() == 0) prof.record(ProfilerEvent::kDispatchMeta, meta_start, g);
  const int me = cfg.rank;
  if (own_direct) {  // 3b. This rank's rows are in x already: the metadata is all it waits for.
    __syncthreads();
    if (threadIdx.x == me)
      publish(b.group_signal(me, me, g), epoch, static_cast<uint32_t>(sh.rows[me]) | round_error_bit(b, epoch));
  }
  if (own_placed) {  // 3c. The own rows' places (sh.own_pos) before the rows; the group's empty own slots' route
    for (int slot = grp.tokens.begin + sh.rows[me] + threadIdx.x; slot < grp.tokens.end; slot += blockDim.x) {
      const size_t row = b.row_index(me, slot);
      a.recv_route.token[row] = -1;
      for (int k = 0; k < cfg.topk; ++k) a.recv_route.pos[row * cfg.topk + k] = -1;
    }
    __syncthreads();
  }
  const uint32_t copied_to =  // ranks whose rows go through recv_x
      all_ranks(cfg.world) & ~(own_direct || own_placed ? 1u << me : 0u);

  // 4. Rows: each chunk is loaded once (the task's first chunk was, above) and sent.
  for (int task = first_task; task < grp.n * chunks; task += kWavesPerBlock) {
    const int i = task / chunks, chunk = task % chunks;
    const uint32_t mask = sh.mask[i] & copied_to;  // not the unused slots' bits
    const bool own = own_placed && ((sh.mask[i] >> me) & 1u);
    if (mask == 0 && !own) continue;
    ProfilerSpan row_span(prof, ProfilerEvent::kDispatchSendRow, tokens.begin + i);
    Vec16 v[kUnroll];
    if (task == first_task) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) v[u] = first_chunk[u];
    } else {
      load_chunk(x_row(i), chunk, in.vecs, v);
    }
    send_chunk<kCodec, kFmt>(b, a, sh, grp, i, chunk, in.vecs, mask, own, v);
  }

  // 5. Announce: every thread's stores of the group are ordered before each signal (the
  //    barrier, then a release per signal), also to ranks that got no row.
  const uint64_t publish_start = prof.now();
  __syncthreads();
  if (threadIdx.x < cfg.world && ((copied_to >> threadIdx.x) & 1u)) {
    publish(b.group_signal(threadIdx.x, me, g), epoch,
            static_cast<uint32_t>(sh.rows[threadIdx.x]) | round_error_bit(b, epoch));
  }
  if (wave_id() == 0) prof.record(ProfilerEvent::kDispatchPublish, publish_start, g);
}

}  // namespace
}  // namespace moe_a2a
