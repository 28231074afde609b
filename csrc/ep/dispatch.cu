// Dispatch, one kernel with a send half and a receive half. What each half writes, publishes and
// waits for is docs/design/protocol.md (the table, "Dispatch", "Token groups"); which block runs
// which half and takes which items is block_shares (ep_device.cuh; protocol.md, "Sending and
// receiving blocks").
//
// Send half: the last sending block counts the (token, k) pairs per expert and publishes them
// first (send_counts: the receivers need every expert's total before placing rows); each sending
// block then sends its token groups (send_group). Receive half: the expert segments from every
// source's counts (receive_counts), then each (group, part) item (receive_part, place_rows).
#include <algorithm>

#include "ep_device.cuh"
#include "flagged_rows.cuh"
#include "fp8_rows.cuh"
#include "moe_a2a/platform/block_ops.h"

namespace moe_a2a {
namespace {

static_assert(kMaxExperts / 2 <= kEpBlock, "one thread per local expert when scanning expert totals");

// A dispatch with every block on both halves places this rank's own rows itself (own_placed,
// dispatch_kernel) where a token group has at most this many (token, k) pairs: their rows of
// expert_x stay in shared memory from the metadata to the rows (DispatchShared::own_pos).
inline constexpr int kOwnPlacedPairs = 4 * kEpBlock;

struct DispatchShared {
  // send half
  uint32_t mask[kEpBlock];        // destination ranks of each token of the group
  int slot[kEpBlock][kMaxWorld];  // its slot on each destination
  int rows[kMaxWorld];            // the group's rows per destination
  uint32_t pairs[kMaxExperts];    // counting block: (token, k) pairs per global expert
  // Pairs per global expert of the tokens before this block's current group, and of the pairs of
  // the group numbered so far: the next pair's rank (place_word).
  uint32_t numbered[kMaxExperts];
  int own_pos[kOwnPlacedPairs];  // own_placed: row of expert_x of pair j of the group, or -1
  // receive half
  int src_tokens[kMaxWorld];
  int seg_first[kMaxExperts / 2], seg_limit[kMaxExperts / 2], seg_total[kMaxExperts / 2];
  int src_first[kMaxExperts];  // [source][local expert]: row of expert_x of the source's first pair
  int all_rows;
  int dest[kRowBatch][kMaxTopk];  // row of expert_x for each (row, k) of a batch, or -1
  uint32_t payload[kMaxWorld];
  SourceRows batch;  // the token groups being placed
  int drawn;         // draw_item's item, for every thread
};

// How the send half turns a row of x into a wire row: copies it (the token type, or fp8 bytes
// the caller quantized, followed by their scales), or quantizes it from a token type into fp8.
// A kernel of its own for each, and for each fp8 format (kFmt), so the plain copy keeps the
// registers it had before fp8 and each quantizing kernel carries one encoder (fp8_rows.cuh).
enum class SendCodec : int { kCopy, kQuantizeBf16, kQuantizeFp16, kQuantizeFp32 };

SendCodec send_codec(const EpContext& c, const DispatchArgs& a) {
  if (!c.cfg.fp8_rows() || a.x_scale != nullptr) return SendCodec::kCopy;
  switch (c.token_type) {
    case TokenType::kBFloat16:
      return SendCodec::kQuantizeBf16;
    case TokenType::kFloat16:
      return SendCodec::kQuantizeFp16;
    default:
      return SendCodec::kQuantizeFp32;
  }
}

// Rows that the send half copies as they are: the token type (not fp8 rows, quantized here or by
// the caller).
MOE_A2A_HD inline bool plain_rows(SendCodec codec, const EpConfig& cfg) {
  return codec == SendCodec::kCopy && !cfg.fp8_rows();
}
// The token count from which a fused launch places its own rows as it sends them (own_placed):
// rows it quantizes from kOwnRowsDirectTokens (from 512 too, fp8 lost 3 us where the ranks' counts
// differ: protocol.md, "Own rows"); plain rows from kOwnPlacedCopyTokens up to kOwnPlacedCopyWorld
// ranks, never beyond (there, from kOwnRowsDirectTokens, own_direct reads them from x); fp8 rows
// that the caller quantized, never.
MOE_A2A_HD inline int own_placed_from(SendCodec codec, const EpConfig& cfg) {
  if (codec != SendCodec::kCopy) return kOwnRowsDirectTokens;
  if (!plain_rows(codec, cfg)) return INT32_MAX;
  return cfg.world <= kOwnPlacedCopyWorld ? kOwnPlacedCopyTokens : INT32_MAX;
}

template <SendCodec kCodec>
inline constexpr TokenType kQuantizedFrom = kCodec == SendCodec::kQuantizeBf16   ? TokenType::kBFloat16
                                            : kCodec == SendCodec::kQuantizeFp16 ? TokenType::kFloat16
                                                                                 : TokenType::kFloat32;

// One row of x as the send half reads it.
struct InputRows {
  size_t row_bytes;
  int vecs;  // 16-byte vectors of a row
};
MOE_A2A_DEVICE InputRows input_rows(const EpConfig& cfg, const DispatchArgs& a) {
  const bool given_fp8 = cfg.fp8_rows() && a.x_scale != nullptr;
  const size_t bytes = given_fp8 ? static_cast<size_t>(cfg.hidden) : cfg.row_bytes();
  return InputRows{bytes, static_cast<int>(bytes / sizeof(Vec16))};
}

// Read as int64 so that an out-of-range int64 id cannot wrap into the valid range. A masked slot
// (kMaskedSlot) is not valid: it is skipped where a bad id would be reported.
MOE_A2A_DEVICE int64_t read_expert(const DispatchArgs& a, size_t i) {
  return a.topk_idx_is_int64 ? static_cast<const int64_t*>(a.topk_idx)[i]
                             : static_cast<int64_t>(static_cast<const int32_t*>(a.topk_idx)[i]);
}
MOE_A2A_DEVICE bool valid_expert(const EpConfig& cfg, int64_t e) { return e >= 0 && e < cfg.num_experts; }

// ---------------------------------------------------------------- send half
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
MOE_A2A_DEVICE MOE_A2A_NOINLINE bool count_wide(const IdT* ids, int num_experts, uint32_t* pairs, int first, int end,
                                                uint32_t add) {
  constexpr int kPerVec = static_cast<int>(sizeof(Vec16) / sizeof(IdT));
  constexpr int kInFlight = 8;  // vectors loaded before the first is counted
  bool bad = false;
  const auto count = [&](int64_t e) {
    if (e >= 0 && e < num_experts)
      atomic_add_relaxed_block(pairs + e, add);
    else if (e != kMaskedSlot)
      bad = true;
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
  return bad;
}

// Adds `add` (1, or ~0u to take them off) to `pairs` (per global expert, in shared memory) for
// each (token, k) pair of topk_idx entries [first, end). True in a thread that saw a bad id
// (neither an expert nor kMaskedSlot): it is counted nowhere, as it is sent nowhere.
MOE_A2A_DEVICE bool count_pairs(const EpConfig& cfg, const DispatchArgs& a, uint32_t* pairs, int first, int end,
                                uint32_t add = 1u) {
  bool bad = false;
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
      if (valid_expert(cfg, ids[u]))
        atomic_add_relaxed_block(pairs + ids[u], add);
      else if (ids[u] != kMaskedSlot)
        bad = true;
    }
  }
  return bad;
}

// The counting block: (token, k) pairs per local expert of every rank, over all tokens, and the
// token count, to every rank. Bad ids are left out here as they are from the rows.
MOE_A2A_DEVICE void send_counts(const EpBuffers& b, const DispatchArgs& a, DispatchShared& sh, uint64_t epoch,
                                ProfilerTrack& prof) {
  const EpConfig& cfg = b.c.cfg;
  const int tokens = a.route.num_tokens;
  for (int e = threadIdx.x; e < cfg.num_experts; e += blockDim.x) sh.pairs[e] = 0;
  __syncthreads();
  const int ids = tokens * cfg.topk;
  bool bad_here;
  if (ids < kWideCountIds)
    bad_here = count_pairs(cfg, a, sh.pairs, 0, ids);
  else if (a.topk_idx_is_int64)
    bad_here = count_wide(static_cast<const int64_t*>(a.topk_idx), cfg.num_experts, sh.pairs, 0, ids, 1u);
  else
    bad_here = count_wide(static_cast<const int32_t*>(a.topk_idx), cfg.num_experts, sh.pairs, 0, ids, 1u);
  const bool bad = __syncthreads_or(bad_here);
  // The counts go as flagged words, each on its own (protocol.md, "Flagged counts"): a signal's
  // release after them waited for the remote stores' acknowledgements, 2.1-2.3 us on 2 x H100 at
  // every shape, and on a busy link the signal then landed 2.4-2.8 us later, behind the rows
  // (session 24's traces of profiler stage dispatch.counts_out).
  ProfilerSpan out_span(prof, ProfilerEvent::kDispatchCountsOut, tokens);
  const int local = experts_per_rank(b.c);
  const uint32_t flag = round_flag(epoch);
  for (int e = threadIdx.x; e < cfg.num_experts; e += blockDim.x) {
    const int r = owner_rank_of(b.c, e);
    st_relaxed_sys(b.recv_count(r, cfg.rank) + (e - r * local), with_round_flag(sh.pairs[e], flag));
  }
  if (threadIdx.x < cfg.world) {
    const uint32_t error = bad ? kFlagErrorBit : round_error_bit(b, epoch);
    st_relaxed_sys(b.recv_count(threadIdx.x, cfg.rank) + local,
                   with_round_flag(static_cast<uint32_t>(tokens) | error, flag));
  }
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

// The row of expert_x of a pair that source `src` sent with place word `place`, or -1: none here
// (kNoLocalExpert, or no local expert), or kDroppedPair: past the expert's limit (a peer's place
// is checked like a count; the overflow was reported with the segments). With `writes` also what
// the receive half's first part writes for the pair: the expert's metadata and weight, and its
// slot's route (row `route_row` of recv_route). The receive half (place_positions) and, for this rank's own pairs,
// the sending block that places them (own_placed, write_metadata) both place through here.
MOE_A2A_DEVICE MOE_A2A_INLINE int place_pair(const EpBuffers& b, const DispatchArgs& a, const DispatchShared& sh,
                                             int src, size_t route_row, int token, int k, int32_t place, float w,
                                             bool writes) {
  const int local = experts_per_rank(b.c);
  const int e = place_expert(place);
  int at = -1;
  if (place >= 0 && e < local) {
    const int pos = sh.src_first[src * local + e] + place_rank(place);
    at = pos < sh.seg_first[e] + sh.seg_limit[e] ? pos : kDroppedPair;
  }
  if (writes) {
    if (at >= 0) {
      a.expert_meta[3 * static_cast<size_t>(at) + 0] = src;
      a.expert_meta[3 * static_cast<size_t>(at) + 1] = token;
      a.expert_meta[3 * static_cast<size_t>(at) + 2] = k;
      a.expert_weights[at] = w;
    }
    a.recv_route.pos[route_row * b.c.cfg.topk + k] = at;
    if (k == 0) a.recv_route.token[route_row] = token;
  }
  return at;
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
// sh.numbered holds (this block's previous group's end; 0 and zeros before its first).
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
  count_pairs(cfg, a, sh.numbered, numbered_to * cfg.topk, tokens.begin * cfg.topk);
  numbered_to = tokens.end;
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

// ---------------------------------------------------------------- receive half
// Rows of expert_x that each local expert may use: [first[e], first[e] + limit[e]). Padded:
// e * capacity and capacity. Packed: prefix sums of the experts' totals, each rounded up to
// expert_alignment, and as many rows as fit before the end of the buffer. Inside a segment the
// sources' pairs follow each other in rank order (src_first).
// `count`: thread e's counts of local expert e from every source (await_counts).
MOE_A2A_DEVICE void expert_segments(const EpBuffers& b, DispatchShared& sh, const int (&count)[kMaxWorld]) {
  using Scan = BlockScan<int, kEpBlock>;
  __shared__ typename Scan::TempStorage scan_tmp;
  const EpConfig& cfg = b.c.cfg;
  const int local = experts_per_rank(b.c);
  const int e = threadIdx.x;
  int n = 0;
#pragma unroll
  for (int src = 0; src < kMaxWorld; ++src) n += count[src];
  int before = 0, all = 0;
  Scan::exclusive_sum(scan_tmp, cfg.packed() ? cfg.aligned_rows(n) : n, before, all);
  if (e < local) {
    sh.seg_total[e] = n;
    const int cap = cfg.expert_capacity;
    const int first = cfg.packed() ? min(before, cap) : e * cap;
    sh.seg_first[e] = first;
    sh.seg_limit[e] = cfg.packed() ? min(n, cap - first) : cap;
    int at = first;
#pragma unroll
    for (int src = 0; src < kMaxWorld; ++src) {
      if (src < cfg.world) sh.src_first[src * local + e] = at;
      at += count[src];
    }
  }
  if (threadIdx.x == 0) sh.all_rows = all;
  __syncthreads();
}

// Packed with expert_alignment > 1: the rows between each expert's last row and the start of
// the next segment are zeros, so a grouped GEMM over whole segments (and its weight gradient)
// reads no garbage. Every block that receives in this launch clears the padding of experts
// recv.first, recv.first + recv.stride, ... (its share of the receive items, HalfShare); no row
// is placed there.
MOE_A2A_DEVICE void zero_padding_rows(const EpBuffers& b, const DispatchArgs& a, const DispatchShared& sh,
                                      HalfShare recv) {
  const EpConfig& cfg = b.c.cfg;
  const int vecs = static_cast<int>(cfg.out_row_bytes() / sizeof(Vec16));
  const int blocks = cfg.scale_blocks();
  Vec16* out = static_cast<Vec16*>(a.expert_x);
  for (int e = recv.first; e < experts_per_rank(b.c); e += recv.stride) {
    const int first = sh.seg_first[e] + min(sh.seg_total[e], sh.seg_limit[e]);
    const int end = min(sh.seg_first[e] + cfg.aligned_rows(sh.seg_total[e]), cfg.expert_capacity);
    const size_t rows = end > first ? static_cast<size_t>(end - first) : 0;
    for (size_t i = threadIdx.x; i < rows * vecs; i += blockDim.x)
      out[static_cast<size_t>(first) * vecs + i] = Vec16{0u, 0u, 0u, 0u};
    if (cfg.fp8_rows()) {  // zero scales too: padding rows dequantize to zeros
      for (size_t i = threadIdx.x; i < rows * blocks; i += blockDim.x)
        a.expert_x_scale[static_cast<size_t>(first) * blocks + i] = 0.0f;
    }
  }
}

// This thread's share of every source's counts of this round (send_counts): thread e < local
// expert e's from every source into count[], thread s < world source s's token count into
// sh.src_tokens[s]. Flagged words: a look loads them all at once and passes once each carries the
// round's flag (protocol.md, "Flagged counts"). False after a timeout, reported for a source
// whose word was missing.
MOE_A2A_DEVICE bool await_counts(const EpBuffers& b, DispatchShared& sh, uint64_t epoch, int (&count)[kMaxWorld]) {
  const EpConfig& cfg = b.c.cfg;
  const int me = cfg.rank;
  const int local = experts_per_rank(b.c);
  const int t = threadIdx.x;
  const bool counts = t < local, tokens = t < cfg.world;
  if (!counts && !tokens) return true;
  const uint32_t flag = round_flag(epoch);
  uint64_t word[kMaxWorld] = {}, token_word = 0;
  int missing = -1;           // a source with a word still missing
  uint32_t missing_flag = 0;  // the flag that word carried
  const auto look = [&] {
#pragma unroll
    for (int src = 0; src < kMaxWorld; ++src) {  // unrolled: every word in flight at once
      if (counts && src < cfg.world) word[src] = ld_relaxed_sys(b.recv_count(me, src) + t);
    }
    if (tokens) token_word = ld_relaxed_sys(b.recv_count(me, t) + local);
    missing = -1;
    const auto check = [&](uint64_t w, int src) {
      if (flag_of(w) != flag) missing = src, missing_flag = flag_of(w);
    };
    if (tokens) check(token_word, t);
#pragma unroll
    for (int src = 0; src < kMaxWorld; ++src) {
      if (counts && src < cfg.world) check(word[src], src);
    }
    return missing < 0;
  };
  if (!spin_bounded(look, b.c.timeout_ticks, b.timed_out())) {
    // Seen: the round that word was last written in, the epoch's low 31 bits (0: never).
    report_error(b.c, ErrorCode::kTimeout, missing, static_cast<int>(WaitSite::kDispatchCounts), -1,
                 signal_epoch(signal_word(epoch, 0)), missing_flag & ~round_flag(0));
    return false;
  }
#pragma unroll
  for (int src = 0; src < kMaxWorld; ++src) count[src] = static_cast<int>(static_cast<uint32_t>(word[src]));
  if (tokens) {
    const uint32_t payload = static_cast<uint32_t>(token_word);
    accept_payload(b.c, payload, t);
    // A count from a peer never addresses past max_tokens.
    sh.src_tokens[t] = min(static_cast<int>(payload & kFlagCountMask), cfg.max_tokens);
    MOE_A2A_PROFILE(profiler_arrivals()[t] = wall_clock());
  }
  return true;
}

// Waits for every source's counts, then lays out the experts' segments; the first receiving
// block writes them out. False after a timeout.
MOE_A2A_DEVICE bool receive_counts(const EpBuffers& b, const DispatchArgs& a, DispatchShared& sh, HalfShare recv,
                                   uint64_t epoch, ProfilerTrack& prof) {
  const EpConfig& cfg = b.c.cfg;
  const uint64_t wait_start = prof.now();
  int count[kMaxWorld] = {};
  if (!__syncthreads_and(await_counts(b, sh, epoch, count))) return false;
  prof.record_wait(ProfilerEvent::kDispatchWaitCounts, wait_start, cfg.world);
  const uint64_t segments_start = prof.now();
  expert_segments(b, sh, count);  // synchronises the block
  if (cfg.expert_alignment > 1) zero_padding_rows(b, a, sh, recv);
  if (recv.first == 0) {
    const int local = experts_per_rank(b.c);
    if (threadIdx.x < cfg.world) a.recv_route.src_tokens[threadIdx.x] = sh.src_tokens[threadIdx.x];
    for (int e = threadIdx.x; e < local; e += blockDim.x) {
      a.expert_num_tokens[e] = min(sh.seg_total[e], sh.seg_limit[e]);
      a.expert_offsets[e] = sh.seg_first[e];
      // The rows past the limit are dropped by every receiving block (place_rows); reported once.
      if (sh.seg_total[e] > sh.seg_limit[e]) {
        if (cfg.packed())
          report_error(b.c, ErrorCode::kCapacityOverflow, -1, -1, -1, cfg.expert_capacity, sh.all_rows);
        else
          report_error(b.c, ErrorCode::kCapacityOverflow, -1, e, -1, cfg.expert_capacity, sh.seg_total[e]);
      }
    }
    if (threadIdx.x == 0) {
      a.expert_offsets[local] = cfg.packed() ? min(sh.all_rows, cfg.expert_capacity) : local * cfg.expert_capacity;
    }
  }
  if (wave_id() == 0) prof.record(ProfilerEvent::kDispatchSegments, segments_start, experts_per_rank(b.c));
  return true;
}

// Row r of the batch sh.batch where its payload is read: slot `slot` of source in.src[i] in
// recv_x, or, for this rank's own rows where they stay in x (`own_direct`, dispatch_kernel), the
// row of x of the token that slot names.
MOE_A2A_DEVICE MOE_A2A_INLINE const Vec16* batch_row(const EpBuffers& b, const DispatchArgs& a, const SourceRows& in,
                                                     int r, bool own_direct) {
  int i, slot;
  in.locate(r, i, slot);
  const int me = b.c.cfg.rank;
  if (!own_direct || in.src[i] != me) return b.recv_x(me, in.src[i], slot);
  const size_t token = static_cast<size_t>(*b.recv_token(me, me, slot));
  return reinterpret_cast<const Vec16*>(static_cast<const uint8_t*>(a.x) + token * b.c.cfg.out_row_bytes());
}

// Positions of batch rows [batch, batch + n): one thread per (row, k) that names a local expert,
// into sh.dest. A place word from a peer is checked like a count: a position past the expert's
// limit is not written (the overflow was reported with the segments). The first part also writes
// the metadata and the route.
MOE_A2A_DEVICE MOE_A2A_INLINE void place_positions(const EpBuffers& b, const DispatchArgs& a, DispatchShared& sh,
                                                   int batch, int n, bool first_part) {
  const EpConfig& cfg = b.c.cfg;
  const int me = cfg.rank;
  const SourceRows& in = sh.batch;
  for (int j = threadIdx.x; j < n * cfg.topk; j += blockDim.x) {
    const auto [r, k] = pair_of(b.c, j);
    int i, slot;
    in.locate(batch + r, i, slot);
    const int src = in.src[i];
    const size_t row = b.row_index(src, slot);
    const int32_t place = b.recv_expert(me, src, slot)[k];
    const int token = *b.recv_token(me, src, slot);
    const float w = b.recv_weight(me, src, slot)[k];
    sh.dest[r][k] = place_pair(b, a, sh, src, row, token, k, place, w, first_part);
  }
}

// Chunk `chunk` of batch row r, `v` (loaded once), to every local expert of the row (sh.dest);
// with fp8 rows, at chunk 0, the row's scales too.
MOE_A2A_DEVICE MOE_A2A_INLINE void copy_to_experts(const EpBuffers& b, const DispatchArgs& a, const DispatchShared& sh,
                                                   int batch, int r, int chunk, int vecs, const Vec16 (&v)[kUnroll]) {
  const EpConfig& cfg = b.c.cfg;
  Vec16* out = static_cast<Vec16*>(a.expert_x);
  for (int k = 0; k < cfg.topk; ++k) {
    const int d = sh.dest[r][k];
    if (d >= 0) store_chunk(out + static_cast<size_t>(d) * vecs, chunk, vecs, v);
  }
  if (cfg.fp8_rows() && chunk == 0) {  // the row's scales, after its bytes
    const int blocks = cfg.scale_blocks();
    const float* scales = wire_scales(batch_row(b, a, sh.batch, batch + r, false), cfg.hidden);  // fp8: staged
    for (int j = lane_id(); j < blocks; j += kWaveSize) {
      const float s = scales[j];
      for (int k = 0; k < cfg.topk; ++k) {
        const int d = sh.dest[r][k];
        if (d >= 0) a.expert_x_scale[static_cast<size_t>(d) * blocks + j] = s;
      }
    }
  }
}

// The batch groups' slots that hold no row this round: their route is written too (token -1,
// positions -1), so it is defined wherever combine may load it (it loads a slot's positions with
// its token, before it knows the slot is empty; compute-sanitizer's initcheck would flag that).
MOE_A2A_DEVICE MOE_A2A_INLINE void mark_empty_slots(const EpBuffers& b, const DispatchArgs& a, const SourceRows& in) {
  const EpConfig& cfg = b.c.cfg;
  for (int i = 0; i < in.count; ++i) {
    const int filled = in.begin[i] + in.first[i + 1] - in.first[i];
    for (int slot = filled + threadIdx.x; slot < in.end[i]; slot += blockDim.x) {
      const size_t row = b.row_index(in.src[i], slot);
      a.recv_route.token[row] = -1;
      for (int k = 0; k < cfg.topk; ++k) a.recv_route.pos[row * cfg.topk + k] = -1;
    }
  }
}

// The rows of the batch (sh.batch: one token group of each of several sources), part `part`
// of them: positions, then the part's chunks of the payload. The first part (the one with
// chunk 0) also writes the metadata and the route.
MOE_A2A_DEVICE void place_rows(const EpBuffers& b, const DispatchArgs& a, DispatchShared& sh, GroupPart part,
                               bool own_direct, ProfilerTrack& prof) {
  const EpConfig& cfg = b.c.cfg;
  const int vecs = static_cast<int>(cfg.out_row_bytes() / sizeof(Vec16));  // the wire row's payload
  const int chunks = part.chunk_count;
  const bool first_part = part.chunk_first == 0;
  const int rows = sh.batch.first[sh.batch.count];
  for (int batch = 0; batch < rows; batch += kRowBatch) {
    const int n = min(kRowBatch, rows - batch);
    // The payload moves as tasks (row, chunk) over the waves. A wave's first chunk does not
    // depend on the positions: loaded now, while they are computed.
    Vec16 first_chunk[kUnroll];
    if (wave_id() < n * chunks) {
      load_chunk(batch_row(b, a, sh.batch, batch + wave_id() / chunks, own_direct),
                 part.chunk_first + wave_id() % chunks, vecs, first_chunk);
    }
    const uint64_t place_start = prof.now();
    place_positions(b, a, sh, batch, n, first_part);
    __syncthreads();
    if (wave_id() == 0) prof.record(ProfilerEvent::kDispatchPlace, place_start, sh.batch.count);
    // Payload: tasks (row, chunk) over the waves; each chunk is read once and written to
    // every local expert of the row.
    for (int task = wave_id(); task < n * chunks; task += kWavesPerBlock) {
      const int r = task / chunks, chunk = part.chunk_first + task % chunks;
      ProfilerSpan copy_span(prof, ProfilerEvent::kDispatchCopy, batch + r);
      Vec16 v[kUnroll];
      if (task == wave_id()) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) v[u] = first_chunk[u];
      } else {
        load_chunk(batch_row(b, a, sh.batch, batch + r, own_direct), chunk, vecs, v);
      }
      copy_to_experts(b, a, sh, batch, r, chunk, vecs, v);
    }
    __syncthreads();  // dest[] is rewritten by the next batch
  }
  if (first_part) mark_empty_slots(b, a, sh.batch);
  __syncthreads();  // sh.batch is rewritten by the next call
}

// Part `part` of group part.group of every source that has one: whatever has arrived is placed
// in one batch, until every source's group is in; with `whole`, all of them in one batch, once the
// last is in (dispatch_kernel: groups of one token). False after a timeout.
// With own_placed this rank's own rows are in place already (send_group).
MOE_A2A_DEVICE bool receive_part(const EpBuffers& b, const DispatchArgs& a, DispatchShared& sh, GroupPart part,
                                 bool own_direct, bool own_placed, bool whole, uint64_t epoch, ProfilerTrack& prof) {
  const EpConfig& cfg = b.c.cfg;
  const int g = part.group;
  uint32_t pending = sources_with_group(cfg, sh.src_tokens, g) & ~(own_placed ? 1u << cfg.rank : 0u);
  while (pending != 0) {
    const uint64_t wait_start = prof.now();
    const auto signal = [&](int src) { return b.group_signal(cfg.rank, src, g); };
    const uint32_t arrived =
        await_some_ranks(b.c, signal, pending, epoch, WaitSite::kDispatchRows, g, sh.payload, whole);
    if (arrived == 0) return false;
    if (wave_id() == 0) prof.record(ProfilerEvent::kDispatchWaitRows, wait_start, __ffs(arrived) - 1);
    pending &= ~arrived;
    const uint64_t batch_start = prof.now();
    if (wave_id() == 0) {  // lane s: group g of source s, if it arrived
      const int s = lane_id();
      const bool here = s < cfg.world && ((arrived >> s) & 1u);
      TokenRange group{0, 0};
      int rows = 0;
      if (here) {
        group = cfg.token_group(sh.src_tokens[s], g);
        // A row count from a peer never addresses past its group.
        rows = min(static_cast<int>(sh.payload[s] & kFlagCountMask), group.end - group.begin);
      }
      gather_batch(sh.batch, cfg.world, here, group, rows);
    }
    __syncthreads();
    if (wave_id() == 0) prof.record(ProfilerEvent::kDispatchBatch, batch_start, __popc(arrived));
    place_rows(b, a, sh, part, own_direct, prof);
  }
  return true;
}

// A split launch's receive items past the receiving blocks' first ones (receiving block j's first
// is item j, j < `first_shared`) go to whichever block asks first: a sending block once it has sent
// all its groups, a receiving block once it has placed its item. They are drawn in order, so the
// groups that arrive first are placed first, and no block keeps a share of them while another
// idles. The ticket word is signal_word(epoch, items drawn): the first block to draw in a round
// finds another round's epoch there and starts the count over (a failed swap: another block did,
// or drew after it), so nothing resets it between rounds.
MOE_A2A_DEVICE int draw_item(const EpBuffers& b, DispatchShared& sh, uint64_t epoch, int first_shared) {
  if (threadIdx.x == 0) {
    uint64_t* ticket = b.recv_ticket();
    const uint64_t fresh = signal_word(epoch, 0u);
    const uint64_t seen = ld_relaxed_sys(ticket);
    if (signal_epoch(seen) != signal_epoch(fresh)) atomic_cas_relaxed_gpu(ticket, seen, fresh);
    sh.drawn = first_shared + static_cast<int>(signal_payload(atomic_add_relaxed_gpu(ticket, uint64_t{1})));
  }
  __syncthreads();
  return sh.drawn;  // read before the next draw: receive_part synchronises the block in between
}

// kOwnRows (own_rows_instance): the instance that may move this rank's own rows without the heap
// (own_direct, own_placed); the other leaves that code out (protocol.md, "Code size").
template <SendCodec kCodec, Fp8Format kFmt, bool kOwnRows>
__global__ void __launch_bounds__(kEpBlock) dispatch_kernel(EpContext c, DispatchArgs a, Role role) {
  __shared__ DispatchShared sh;
  // Launched early (launch_kernel): nothing before this reads memory. The next kernel, combine
  // (one block an SM: its registers), may be placed at once (protocol.md, "Kernel boundaries").
  await_prior_kernels(/*let_next_launch=*/true);
  ProfilerTrack prof(c.profiler, ProfilerEvent::kDispatch);
  const EpBuffers b{c};
  const EpConfig& cfg = c.cfg;
  const uint64_t epoch = b.current_epoch();
  const BlockShares share =
      block_shares(role, cfg.dispatch_sender_blocks(a.route.num_tokens, kCodec != SendCodec::kCopy));
  const HalfShare& send = share.send;
  const HalfShare& recv = share.recv;
  // A launch with every block on both halves places this rank's own rows in expert_x as it sends
  // them (from own_placed_from tokens on): they are neither staged in recv_x nor read back, and
  // their local writes go out beside the link's (protocol.md, "Own rows"). Its blocks lay out the
  // segments before they send. Not where a group's pairs outgrow sh.own_pos.
  const bool own_placed = kOwnRows && role == Role::kBoth && !share.split && send.runs && recv.runs &&
                          a.route.num_tokens >= own_placed_from(kCodec, cfg) &&
                          cfg.max_group_tokens() * cfg.topk <= kOwnPlacedPairs;
  // A launch that sends and receives plain rows, and does not place them so (its halves split),
  // reads this rank's own rows from x instead of staging them in recv_x, from kOwnRowsDirectTokens
  // on (protocol.md, "Own rows").
  const bool own_direct = kOwnRows && role == Role::kBoth && plain_rows(kCodec, cfg) && !own_placed &&
                          a.route.num_tokens >= kOwnRowsDirectTokens;

  const int my_groups = send.runs ? cfg.num_groups(a.route.num_tokens) : 0;
  int numbered_to = 0;  // see send_group
  if (send.runs) {
    for (int e = threadIdx.x; e < cfg.num_experts; e += blockDim.x) sh.numbered[e] = 0;
    __syncthreads();
    if (send.first == send.stride - 1) {  // the last sending block counts
      ProfilerSpan count_span(prof, ProfilerEvent::kDispatchCounts, a.route.num_tokens);
      send_counts(b, a, sh, epoch, prof);
      // If it also sends (every block does both), its first group is among the last: the pairs
      // before it are the totals less the pairs from it on, fewer ids to read than from token 0.
      const int tokens = a.route.num_tokens;
      const int begin = send.first < my_groups ? cfg.token_group(tokens, send.first).begin : 0;
      if (tokens - begin < begin) {
        for (int e = threadIdx.x; e < cfg.num_experts; e += blockDim.x) sh.numbered[e] = sh.pairs[e];
        __syncthreads();
        count_pairs(cfg, a, sh.numbered, begin * cfg.topk, tokens * cfg.topk, ~0u);
        numbered_to = begin;
      }
    }
  }
  // This block's first group, or, a sending block of a split, all of them, go before the count wait
  // (step 0), except with own_placed, whose rows' places need the segments first. One call site
  // each, hence the loop: the kernel's code size is on the critical path (protocol.md, "Code size").
  int next = send.first;  // this block's next group to send
  // Receive items: every source's groups, each split into `parts` parts by chunk where the
  // receiving blocks outnumber the groups (item u is part u % parts of group u / parts).
  const int chunks = chunks_per_row(static_cast<int>(cfg.out_row_bytes() / sizeof(Vec16)));
  int parts = 1, src_items = 0;
  // Where every source's groups hold one token, a receive item waits for every source's rows and
  // places them in one batch: its positions and copies are a chain of memory round trips (about 2
  // us on 2 x H100, session 25's traces) that a few more rows hardly lengthen, so a batch of the
  // rows that came first (this rank's own, at a few tokens) ends the item a chain later than
  // waiting for the rest (protocol.md, "Receive items").
  bool whole = false;
#pragma unroll 1
  for (int step = 0; step < 2; ++step) {
    if ((step == 0) != own_placed) {
      for (; next < my_groups && (next == send.first || share.sends_first); next += send.stride)
        send_group<kCodec, kFmt>(b, a, sh, next, numbered_to, own_direct, own_placed, epoch, prof);
    } else if (recv.runs) {
      if (!receive_counts(b, a, sh, recv, epoch, prof)) return;  // timed out: engine failed
      // num_groups(T) = min(T, max_groups()) grows with T: the most tokens give the most groups.
      const int most = max_over_sources(cfg.world, [&](int s) { return sh.src_tokens[s]; });
      const int src_groups = cfg.num_groups(most);
      parts = parts_per_group(src_groups, recv.blocks, chunks);
      src_items = src_groups * parts;
      whole = most <= cfg.max_groups();
    }
  }
  // Step i: send this block's next group, then receive its i-th item (a block that runs both
  // halves receives item u after sending group u + G, so that the link and its local copies
  // overlap). A split's blocks have sent everything by now; the receive items past each
  // receiving block's first are drawn (draw_item), where there are any.
  const bool draws = share.split && src_items > recv.blocks;
  const auto draw_or_end = [&] { return draws ? draw_item(b, sh, epoch, recv.blocks) : src_items; };
  const int first_item = share.split && recv.first >= recv.blocks ? draw_or_end() : recv.first;
  for (int u = first_item; u < src_items || next < my_groups;
       u = share.split ? draw_or_end() : u + recv.stride, next += send.stride) {
    if (next < my_groups) send_group<kCodec, kFmt>(b, a, sh, next, numbered_to, own_direct, own_placed, epoch, prof);
    if (u < src_items &&
        !receive_part(b, a, sh, group_part(u, parts, chunks), own_direct, own_placed, whole, epoch, prof))
      return;
  }
}

// The kernel of a codec, of the config's fp8 format where it quantizes, and of the batch (kOwnRows).
template <SendCodec kCodec, bool kOwnRows>
void launch_dispatch_instance(const EpContext& ctx, const DispatchArgs& args, Role role, hipStream_t stream) {
  const dim3 grid(ctx.cfg.num_blocks), block(kEpBlock);
  const bool early = ctx.early_launch;
  if constexpr (kCodec == SendCodec::kCopy) {
    launch_kernel(dispatch_kernel<kCodec, Fp8Format::kNone, kOwnRows>, grid, block, stream, early, ctx, args, role);
  } else if (ctx.cfg.fp8 == Fp8Format::kE4M3Fnuz) {
    launch_kernel(dispatch_kernel<kCodec, Fp8Format::kE4M3Fnuz, kOwnRows>, grid, block, stream, early, ctx, args, role);
  } else {
    launch_kernel(dispatch_kernel<kCodec, Fp8Format::kE4M3Fn, kOwnRows>, grid, block, stream, early, ctx, args, role);
  }
}
template <SendCodec kCodec>
void launch_dispatch_kernel(const EpContext& ctx, const DispatchArgs& args, Role role, hipStream_t stream) {
  // the instance with the own-rows code from where own_placed or own_direct may run
  const int from = std::min(own_placed_from(kCodec, ctx.cfg), kOwnRowsDirectTokens);
  if (own_rows_instance(role, args.route.num_tokens, from))
    launch_dispatch_instance<kCodec, true>(ctx, args, role, stream);
  else
    launch_dispatch_instance<kCodec, false>(ctx, args, role, stream);
}

}  // namespace

void launch_dispatch(const EpContext& ctx, const DispatchArgs& args, Role role, hipStream_t stream) {
  if (sends(role)) {
    const int num_tokens = args.route.num_tokens;
    MOE_A2A_CHECK(num_tokens >= 0 && num_tokens <= ctx.cfg.max_tokens, "dispatch: num_tokens ", num_tokens,
                  " outside [0, ", ctx.cfg.max_tokens, "]");
  }
  const SendCodec codec = sends(role) ? send_codec(ctx, args) : SendCodec::kCopy;
  switch (codec) {
    case SendCodec::kCopy:
      launch_dispatch_kernel<SendCodec::kCopy>(ctx, args, role, stream);
      break;
    case SendCodec::kQuantizeBf16:
      launch_dispatch_kernel<SendCodec::kQuantizeBf16>(ctx, args, role, stream);
      break;
    case SendCodec::kQuantizeFp16:
      launch_dispatch_kernel<SendCodec::kQuantizeFp16>(ctx, args, role, stream);
      break;
    case SendCodec::kQuantizeFp32:
      launch_dispatch_kernel<SendCodec::kQuantizeFp32>(ctx, args, role, stream);
      break;
  }
}

}  // namespace moe_a2a
