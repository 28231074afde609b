// Combine, one kernel with a send half (expert side) and a receive half (token side); it ends
// the round. What each half writes, publishes and waits for is docs/design/protocol.md (the table,
// "Combine", "Flagged partial sums"); which block takes which combine unit is block_shares
// (block_turns.cuh; protocol.md, "Sending and receiving blocks").
//
// Send half (send_partials): for unit u of every source, the partial sums of the rows' local
// experts into the source's comb_x (or comb_flagged), then a partial signal per source. Which rows
// exist and where their experts' outputs are comes from the dispatch's RecvRoute, so the same
// kernel serves the forward pass and, later, the backward of dispatch. Receive half (receive_unit):
// out[t] = the sum over the ranks t went to, in ascending rank order, fp32, cast once: bitwise the
// same whatever the arrival order. With the weights at the experts (kWeightGrads, the backward of
// dispatch of such a layer), each used pair's weight gradient rides along as a flagged comb_w word
// (send_weight_grad, receive_weight_grads; docs/design/weights-at-experts.md).
#include "block_turns.cuh"
#include "ep_device.cuh"
#include "flagged_rows.cuh"

namespace moe_a2a {
namespace {

struct CombineShared {
  int src_tokens[kMaxWorld];
  int pos[kRowBatch][kMaxTopk];
  float weight[kRowBatch][kMaxTopk];  // the router weight of each pos (1: unweighted, or none here)
  int token[kRowBatch];
  uint32_t mask[kEpBlock];  // receive half: the ranks each token of the group went to
  int own_slot[kEpBlock];   // receive half, own_direct: each token's slot in its own rows (recv_route)
  uint32_t payload[kMaxWorld];
  SourceRows batch;          // the token groups being answered
  int src_parts[kMaxWorld];  // send half: combine_parts of each source's token count
  // Send half: the chunks of each row of batch source i: [chunk_first[i], + chunk_count[i]).
  int chunk_first[kMaxWorld], chunk_count[kMaxWorld];
  int chunk_span;  // the largest chunk_count of the batch
  bool timed_out;  // receive half, flagged partial sums: a wave of this block gave up
};

// Waits until every rank's start signal of this round is in (one block; false after a timeout,
// reported at `site`): every peer's combine has started, so it is done reading what this rank sent
// in the round's earlier kernels. For the two launches that no other wait covers: the backward of
// dispatch before it writes the peers' comb_x (kDispatchGradReady), and a rank with no combine units
// before its next round (kCombineStart); protocol.md, "Why nothing is overwritten too early".
MOE_A2A_DEVICE bool await_every_start(const EpBuffers& b, CombineShared& sh, uint64_t epoch, WaitSite site) {
  const EpConfig& cfg = b.c.cfg;
  const auto signal = [&](int src) { return b.start_signal(cfg.rank, src); };
  return await_ranks(b.c, signal, all_ranks(cfg.world), epoch, site, -1, sh.payload);
}

// Unit `u` of every source in `sources` that has one, as one batch (sh.batch), with the chunks of
// each source's rows (sh.chunk_first/count) and the most chunks of any (sh.chunk_span). Wave 0;
// lane s is source s. The batch's sources start at rank (me + 1 + u) % world, so that at any time
// the blocks of every rank write to all ranks alike: in ascending order every rank's blocks wrote
// to rank 0 first, then to rank 1, ..., and each rank's links in took the whole node's traffic in
// turn (world 4, 4 x H100: combine took 1.6x the dispatch's time at 2048 tokens a rank).
MOE_A2A_DEVICE MOE_A2A_INLINE void gather_unit_batch(const EpConfig& cfg, CombineShared& sh, int u, int chunks,
                                                     uint32_t sources) {
  if (wave_id() != 0) return;
  const int s = lane_id();
  const int tokens = s < cfg.world ? sh.src_tokens[s] : 0;
  const int parts = s < cfg.world ? sh.src_parts[s] : 1;  // written by this lane (combine_kernel)
  // s < world first: a 64-lane wave's lanes 32-63 would shift the 32-bit mask past its width.
  const bool here = s < cfg.world && ((sources >> s) & 1u) && u < cfg.num_groups(tokens) * parts;
  GroupPart unit{0, 0, 0};
  TokenRange group{0, 0};
  if (here) {
    unit = group_part(u, parts, chunks);
    group = cfg.token_group(tokens, unit.group);
  }
  // Every slot of the group is a batch row; the empty ones are skipped by sum_partials.
  const int at =
      gather_batch(sh.batch, cfg.world, here, group, group.end - group.begin, (cfg.rank + 1 + u) % cfg.world);
  if (here) {
    sh.chunk_first[at] = unit.chunk_first;
    sh.chunk_count[at] = unit.chunk_count;
  }
  const int span = max_over_sources(cfg.world, [&](int) { return unit.chunk_count; });
  if (lane_id() == 0) sh.chunk_span = span;
}

// sh.pos[r][k] = p, unless it addresses past expert_y (then -1: none here), and its weight
// (1 where unweighted or none here).
MOE_A2A_DEVICE MOE_A2A_INLINE void set_position(const EpContext& c, const CombineArgs& a, CombineShared& sh, int r,
                                                int k, int p) {
  if (static_cast<size_t>(p) >= output_rows(c)) p = -1;  // also p < 0
  sh.pos[r][k] = p;
  sh.weight[r][k] = a.expert_weights == nullptr || p < 0 ? 1.0f : a.expert_weights[p];
}

// kWeightGrads: pair (token, k) of source src, whose expert is here at row p (or had no row left:
// kDroppedPair, gradient 0), sends its weight's gradient to src as a flagged comb_w word, one
// relaxed store: src's token side awaits a word for every used pair (receive_weight_grads). Called
// once a pair: by the part of its group that holds chunk 0. Other pairs (expert elsewhere) send none.
template <bool kWeightGrads>
MOE_A2A_DEVICE MOE_A2A_INLINE void send_weight_grad(const EpBuffers& b, const CombineArgs& a, int src, int token, int k,
                                                    int p, uint32_t flag) {
  if constexpr (kWeightGrads) {
    const bool here = static_cast<size_t>(p) < output_rows(b.c);
    if (!here && p != kDroppedPair) return;
    const float grad = here && a.pair_weight_grads != nullptr ? a.pair_weight_grads[p] : 0.0f;
    st_relaxed_sys(b.comb_w(src, token) + k, with_round_flag(__float_as_uint(grad), flag));
  }
}

// sh.pos[r][k], sh.weight[r][k] and sh.token[r] of batch rows [batch, batch + n): where each
// (row, k)'s expert output is (-1: none here), its weight, and the row's token (-1: an empty
// slot). One thread per (row, k). The weights are loaded here, once a row, not by each of its
// chunks' tasks, where each load was one more memory latency before the rows' loads. kWeightGrads:
// each pair's weight gradient too (send_weight_grad).
template <bool kWeightGrads>
MOE_A2A_DEVICE MOE_A2A_INLINE void load_positions(const EpBuffers& b, const CombineArgs& a, CombineShared& sh,
                                                  int batch, int n, uint32_t flag) {
  const EpConfig& cfg = b.c.cfg;
  const SourceRows& in = sh.batch;
  for (int j = threadIdx.x; j < n * cfg.topk; j += blockDim.x) {
    const auto [r, k] = pair_of(b.c, j);
    int i, slot;
    in.locate(batch + r, i, slot);
    const size_t row = b.row_index(in.src[i], slot);
    const int token = a.recv_route.token[row];
    int p = a.recv_route.pos[row * cfg.topk + k];  // loaded with the token; kept only if the slot is used
    // An empty slot, or a token index past its source's tokens (the route came from the
    // caller: it could address outside comb_x or comb_flagged), sends nothing.
    const bool used = token >= 0 && token < sh.src_tokens[in.src[i]];
    set_position(b.c, a, sh, r, k, used ? p : -1);
    if (k == 0) sh.token[r] = used ? token : -1;
    if constexpr (kWeightGrads) {
      if (used && sh.chunk_first[i] == 0) send_weight_grad<kWeightGrads>(b, a, in.src[i], token, k, p, flag);
    }
  }
}

// Chunk `chunk` of the partial sum of batch row r (its positions and weights in sh.pos[r] and
// sh.weight[r], lane k taking k's): the experts are summed in order of k, kSumInFlight loads at a
// time, in fp32, rounded once to the token type (as comb_x holds it).
template <TokenType kType>
MOE_A2A_DEVICE MOE_A2A_INLINE void row_partial(const EpConfig& cfg, const CombineArgs& a, const CombineShared& sh,
                                               int r, int chunk, int vecs, Vec16 (&packed)[kUnroll]) {
  const Vec16* y = static_cast<const Vec16*>(a.expert_y);
  const int p = lane_id() < cfg.topk ? sh.pos[r][lane_id()] : -1;
  const float w = lane_id() < cfg.topk ? sh.weight[r][lane_id()] : 1.0f;
  const LaneMask here = wave_ballot(p >= 0);
  const auto kth = [&](int j) { return nth_set_bit(here, j); };
  float acc[kUnroll][8] = {};
  sum_row_chunks<kType>(
      acc, popcount(here), [&](int j) { return y + static_cast<size_t>(wave_shfl(p, kth(j))) * vecs; },
      [&](int j) { return wave_shfl(w, kth(j)); }, chunk, vecs);
#pragma unroll
  for (int v = 0; v < kUnroll; ++v) packed[v] = pack_vec<kType>(acc[v]);
}

// The partial sums of batch rows [batch, batch + n) (positions from load_positions), each stored
// into its source's comb_x or comb_flagged. Tasks (row, chunk of the unit) over the waves.
template <TokenType kType>
MOE_A2A_DEVICE MOE_A2A_INLINE void sum_partials(const EpBuffers& b, const CombineArgs& a, const CombineShared& sh,
                                                int batch, int n, int span, int vecs, uint32_t flag,
                                                ProfilerTrack& prof) {
  const EpConfig& cfg = b.c.cfg;
  const SourceRows& in = sh.batch;
  for (int task = wave_id(); task < n * span; task += kWavesPerBlock) {
    const int r = task / span;
    if (sh.token[r] < 0) continue;
    int i, slot;
    in.locate(batch + r, i, slot);
    if (task % span >= sh.chunk_count[i]) continue;  // this source's unit has fewer chunks
    const int chunk = sh.chunk_first[i] + task % span;
    const int src = in.src[i];
    ProfilerSpan send_span(prof, ProfilerEvent::kCombineSendRow, src);
    Vec16 packed[kUnroll];
    row_partial<kType>(cfg, a, sh, r, chunk, vecs, packed);
    if (cfg.flagged_partials(sh.src_tokens[src])) {
      store_chunk_flagged(b.comb_flagged(src, cfg.rank, sh.token[r]), chunk, vecs, packed, flag);
    } else {
      store_chunk(b.comb_x(src, cfg.rank, sh.token[r]), chunk, vecs, packed);
    }
  }
}

// The partial sums of combine unit `u` of every source in `sources` that has one, in one batch,
// then one partial signal to each of those sources.
template <TokenType kType, bool kWeightGrads>
MOE_A2A_DEVICE void send_partials(const EpBuffers& b, const CombineArgs& a, CombineShared& sh, int u, uint32_t sources,
                                  uint64_t epoch, ProfilerTrack& prof) {
  const EpConfig& cfg = b.c.cfg;
  const int vecs = b.vecs_per_row();
  uint64_t route_start = prof.now();
  gather_unit_batch(cfg, sh, u, chunks_per_row(vecs), sources);
  __syncthreads();
  const SourceRows& in = sh.batch;
  const int rows = in.first[in.count];
  const int span = sh.chunk_span;
  const uint32_t flag = round_flag(epoch);
  for (int batch = 0; batch < rows; batch += kRowBatch) {
    const int n = min(kRowBatch, rows - batch);
    load_positions<kWeightGrads>(b, a, sh, batch, n, flag);
    __syncthreads();
    if (wave_id() == 0) prof.record(ProfilerEvent::kCombineRoute, route_start, n);
    sum_partials<kType>(b, a, sh, batch, n, span, vecs, flag, prof);
    __syncthreads();  // pos/token are rewritten by the next batch; stores before the signals
    route_start = prof.now();
  }
  const uint64_t publish_start = prof.now();
  // A token rank with flagged partial sums waits for this rank's start signal instead (combine_kernel).
  if (threadIdx.x < in.count && !cfg.flagged_partials(sh.src_tokens[in.src[threadIdx.x]]))
    publish(b.partial_signal(in.src[threadIdx.x], cfg.rank, u), epoch, round_error_bit(b, epoch));
  if (wave_id() == 0) prof.record(ProfilerEvent::kCombinePublish, publish_start, in.count);
  __syncthreads();  // sh.batch is rewritten by the next call
}

// acc += chunk `chunk` of the flagged partial sums of token t from the ranks in `mask`, in
// ascending rank order (the order and arithmetic of sum_row_chunks, so the result is bitwise the
// same as from comb_x), each rank's words taken as they land. One wave; false after a timeout
// (reported, naming the rank missing).
template <TokenType kType>
MOE_A2A_DEVICE bool sum_flagged_partials(const EpBuffers& b, float (&acc)[kUnroll][8], uint32_t mask, int t, int chunk,
                                         uint64_t epoch, int u) {
  for (uint32_t left = mask; left != 0; left &= left - 1) {
    const int r = __ffs(static_cast<int>(left)) - 1;
    const auto take = [&](int c, const Vec16& v) { fma_vec<kType>(acc[c], 1.0f, v); };
    const bool arrived = await_chunk_flagged(b.comb_flagged(b.c.cfg.rank, r, t), chunk, b.vecs_per_row(),
                                             round_flag(epoch), take, b.c.timeout_ticks, b.timed_out());
    const LaneMask late = wave_ballot(!arrived);
    if (late != 0) {
      if (lane_id() == nth_set_bit(late, 0)) {
        report_error(b.c, ErrorCode::kTimeout, r, static_cast<int>(WaitSite::kCombinePartials), u,
                     signal_epoch(signal_word(epoch, 0)), 0);
      }
      return false;
    }
  }
  return true;
}

// Own rows (`own_direct`, combine_kernel): this rank's own tokens' rows are summed where their
// sum is needed, on the token side, instead of through comb_x[me]. Each token's slot among this
// rank's own rows of its group (the slot dispatch gave it, number_slots): its place among the
// group's tokens that went to this rank. Wave 0, into sh.own_slot; the caller synchronises.
MOE_A2A_DEVICE MOE_A2A_INLINE void number_own_slots(const EpConfig& cfg, CombineShared& sh, TokenRange group) {
  if (wave_id() != 0) return;
  int running = group.begin;
  for (int base = 0; base < group.end - group.begin; base += kWaveSize) {
    const int i = base + lane_id();
    const bool mine = i < group.end - group.begin && ((sh.mask[i] >> cfg.rank) & 1u);
    const LaneMask bits = wave_ballot(mine);
    if (mine) sh.own_slot[i] = running + popcount(bits & lanes_below());
    running += popcount(bits);
  }
}

// sh.pos[r][k] and sh.weight[r][k] of this rank's own rows for tokens group.begin + [first,
// first + n) of the unit (load_positions, for the token side); -1 where a token did not come here.
// kWeightGrads, in the unit that holds chunk 0: each own pair's weight gradient into this rank's
// own comb_w, where receive_weight_grads takes it with the peers'.
template <bool kWeightGrads>
MOE_A2A_DEVICE MOE_A2A_INLINE void load_own_positions(const EpBuffers& b, const CombineArgs& a, CombineShared& sh,
                                                      TokenRange group, GroupPart unit, int first, int n,
                                                      uint32_t flag) {
  const EpConfig& cfg = b.c.cfg;
  for (int j = threadIdx.x; j < n * cfg.topk; j += blockDim.x) {
    const auto [r, k] = pair_of(b.c, j);
    const bool here = (sh.mask[first + r] >> cfg.rank) & 1u;
    const int p = here ? a.recv_route.pos[b.row_index(cfg.rank, sh.own_slot[first + r]) * cfg.topk + k] : -1;
    set_position(b.c, a, sh, r, k, p);
    if constexpr (kWeightGrads) {
      if (here && unit.chunk_first == 0)
        send_weight_grad<kWeightGrads>(b, a, cfg.rank, group.begin + first + r, k, p, flag);
    }
  }
}

// acc = chunk `chunk` of out[t]: the sum, in ascending rank order, of the peers' partials in `mask`
// from comb_x and of this rank's own (row_partial of batch row r's positions): bitwise the sum
// from comb_x. The lowest peer's chunk is loaded before the own rows, so that their loads are in
// flight together; further peers (world > 2) one at a time.
template <TokenType kType>
MOE_A2A_DEVICE MOE_A2A_INLINE void sum_with_own_rows(const EpBuffers& b, const CombineArgs& a, const CombineShared& sh,
                                                     float (&acc)[kUnroll][8], uint32_t mask, int t, int r, int chunk,
                                                     int vecs) {
  const EpConfig& cfg = b.c.cfg;
  const int me = cfg.rank;
  const uint32_t peers = mask & ~(1u << me);
  const int first = peers != 0 ? __ffs(static_cast<int>(peers)) - 1 : -1;
  Vec16 first_peer[kUnroll];
  if (first >= 0) load_chunk(b.comb_x(me, first, t), chunk, vecs, first_peer);
  Vec16 own[kUnroll];
  row_partial<kType>(cfg, a, sh, r, chunk, vecs, own);
  for (uint32_t left = mask; left != 0; left &= left - 1) {
    const int rank = __ffs(static_cast<int>(left)) - 1;
    Vec16 v[kUnroll];
    if (rank == first) {
#pragma unroll
      for (int c = 0; c < kUnroll; ++c) v[c] = first_peer[c];
    } else if (rank == me) {
#pragma unroll
      for (int c = 0; c < kUnroll; ++c) v[c] = own[c];
    } else {
      load_chunk(b.comb_x(me, rank, t), chunk, vecs, v);
    }
#pragma unroll
    for (int c = 0; c < kUnroll; ++c) fma_vec<kType>(acc[c], 1.0f, v[c]);
  }
}

// acc rounded to the token type, into chunk `chunk` of out[t].
template <TokenType kType>
MOE_A2A_DEVICE MOE_A2A_INLINE void store_sum(const CombineArgs& a, int t, int chunk, int vecs,
                                             const float (&acc)[kUnroll][8]) {
  Vec16 packed[kUnroll];
#pragma unroll
  for (int c = 0; c < kUnroll; ++c) packed[c] = pack_vec<kType>(acc[c]);
  store_chunk(static_cast<Vec16*>(a.out) + static_cast<size_t>(t) * vecs, chunk, vecs, packed);
}

// receive_unit's sums with this rank's own rows (own_direct), once the peers' partials are in: in
// batches of kRowBatch tokens, each batch's own positions loaded first (load_own_positions).
template <TokenType kType, bool kWeightGrads>
MOE_A2A_DEVICE void reduce_with_own_rows(const EpBuffers& b, const CombineArgs& a, CombineShared& sh, TokenRange group,
                                         GroupPart unit, uint32_t flag, ProfilerTrack& prof) {
  const int vecs = b.vecs_per_row();
  number_own_slots(b.c.cfg, sh, group);
  __syncthreads();
  const int tokens = group.end - group.begin;
  for (int first = 0; first < tokens; first += kRowBatch) {
    const int n = min(kRowBatch, tokens - first);
    load_own_positions<kWeightGrads>(b, a, sh, group, unit, first, n, flag);
    __syncthreads();
    for (int task = wave_id(); task < n * unit.chunk_count; task += kWavesPerBlock) {
      const int r = task / unit.chunk_count, chunk = unit.chunk_first + task % unit.chunk_count;
      const int t = group.begin + first + r;
      ProfilerSpan reduce_span(prof, ProfilerEvent::kCombineReduce, t);
      float acc[kUnroll][8] = {};
      sum_with_own_rows<kType>(b, a, sh, acc, sh.mask[first + r], t, r, chunk, vecs);
      store_sum<kType>(a, t, chunk, vecs, acc);
    }
    __syncthreads();  // sh.pos and sh.weight are the next batch's; sh.mask the next unit's
  }
}

// kWeightGrads: the weight gradients of the pairs of this unit's group, if this rank asked for them
// (CombineArgs::grad_topk_weights), in the unit that holds chunk 0, after its sums, whose loads the
// words' flights overlap: each used pair's comb_w word, from the rank its expert is on (or this
// one's own, load_own_positions). False after a timeout (reported).
template <bool kWeightGrads>
MOE_A2A_DEVICE bool receive_weight_grads(const EpBuffers& b, const CombineArgs& a, TokenRange group, GroupPart unit,
                                         uint64_t epoch, int u) {
  if constexpr (kWeightGrads) {
    if (a.grad_topk_weights == nullptr || unit.chunk_first != 0) return true;
    const bool arrived = await_weight_grads(b, a.route, a.grad_topk_weights, group, round_flag(epoch));
    // Which peer answers pair (t, k) is not known here (dest_mask names ranks, not slots): peer -1.
    if (!arrived) {
      report_error(b.c, ErrorCode::kTimeout, -1, static_cast<int>(WaitSite::kDispatchGradWeights), u,
                   signal_epoch(signal_word(epoch, 0)), 0);
    }
    return __syncthreads_and(arrived) != 0;
  }
  return true;
}

// Out[t] for this rank's combine unit `u` (`unit`: its chunks of its group's tokens), once every
// rank's partials for it are in; kWeightGrads: then its weight gradients. False after a timeout.
template <TokenType kType, bool kWeightGrads>
MOE_A2A_DEVICE bool receive_unit(const EpBuffers& b, const CombineArgs& a, CombineShared& sh, int u, GroupPart unit,
                                 bool own_direct, uint64_t epoch, ProfilerTrack& prof) {
  const EpConfig& cfg = b.c.cfg;
  const int me = cfg.rank;
  const int vecs = b.vecs_per_row();
  const TokenRange group = cfg.token_group(a.route.num_tokens, unit.group);
  const uint32_t ranks = all_ranks(cfg.world);
  const bool flagged = cfg.flagged_partials(a.route.num_tokens);
  // The group's destination masks are this rank's own (from its dispatch): loaded while the
  // partial sums are on their way. At most kEpBlock tokens a group (validate()).
  if (threadIdx.x < group.end - group.begin) {
    sh.mask[threadIdx.x] = static_cast<uint32_t>(a.route.dest_mask[group.begin + threadIdx.x]) & ranks;
  }
  if (threadIdx.x == 0) sh.timed_out = false;
  // Every rank signals every unit, also those it has no row of, and the wait covers all of
  // them: a rank may start the next round only when every peer is done reading what it sent.
  // Partial sums in comb_x are read after it; flagged ones as they land, with each rank's start
  // signal in place of its partial signals (below).
  // (await_ranks synchronises the block, so the masks are in shared memory after it.)
  if (flagged) {
    __syncthreads();  // the masks
  } else {
    const uint64_t wait_start = prof.now();
    const auto signal = [&](int r) { return b.partial_signal(me, r, u); };
    const uint32_t senders = own_direct ? ranks & ~(1u << me) : ranks;  // own rows: summed below
    if (!await_ranks(b.c, signal, senders, epoch, WaitSite::kCombinePartials, u, sh.payload)) return false;
    prof.record_wait(ProfilerEvent::kCombineWait, wait_start, cfg.world);
  }
  if (own_direct) {
    reduce_with_own_rows<kType, kWeightGrads>(b, a, sh, group, unit, round_flag(epoch), prof);
    if constexpr (kWeightGrads) return receive_weight_grads<kWeightGrads>(b, a, group, unit, epoch, u);
    return true;
  }
  for (int task = wave_id(); task < (group.end - group.begin) * unit.chunk_count; task += kWavesPerBlock) {
    const int i = task / unit.chunk_count, chunk = unit.chunk_first + task % unit.chunk_count;
    const int t = group.begin + i;
    const uint32_t mask = sh.mask[i];
    ProfilerSpan reduce_span(prof, ProfilerEvent::kCombineReduce, t);
    // The ranks' partial sums in ascending rank order, all loads in flight together.
    float acc[kUnroll][8] = {};
    if (flagged) {
      if (!sum_flagged_partials<kType>(b, acc, mask, t, chunk, epoch, u)) {
        sh.timed_out = true;
        break;
      }
    } else {
      sum_row_chunks<kType>(
          acc, __popc(mask), [&](int j) { return b.comb_x(me, nth_set_bit(mask, j), t); }, [](int) { return 1.0f; },
          chunk, vecs);
    }
    store_sum<kType>(a, t, chunk, vecs, acc);
  }
  // Flagged: every rank's start signal instead of its partial signals, which it does not publish for
  // this rank (send_partials): what the wait proves is that every peer is done reading what this
  // rank sent, and its start says so as well as a partial signal would, ~1 us earlier (no fence
  // after its partial sums). Awaited by the last wave, which at a few tokens has no sum to do.
  if (flagged && wave_id() == kWavesPerBlock - 1 && lane_id() < cfg.world) {
    uint32_t payload = 0;
    if (!await_signal(b.c, b.start_signal(me, lane_id()), epoch, lane_id(), WaitSite::kCombineStart, -1, &payload))
      sh.timed_out = true;
  }
  __syncthreads();  // sh.mask is rewritten by the next unit; sh.timed_out is final
  if constexpr (kWeightGrads) {
    if (flagged && sh.timed_out) return false;
    return receive_weight_grads<kWeightGrads>(b, a, group, unit, epoch, u);
  }
  return !(flagged && sh.timed_out);
}

// kOwnRows (own_rows_instance): the instance that may sum this rank's own rows on the token side
// (own_direct); the other leaves that code out (protocol.md, "Code size"). kWeightGrads
// (CombineArgs::sends_weight_grads): the backward of dispatch with the weights at the experts, the
// only launch that carries the pairs' weight gradients; the forward combine is built without it.
template <TokenType kType, bool kOwnRows, bool kWeightGrads>
__global__ void __launch_bounds__(kEpBlock) combine_kernel(EpContext c_passed, CombineArgs a_passed, Role role) {
  MOE_A2A_READ_IN_PLACE(c, a);  // c and a, where the launch put them (AMD: no copy in scratch)
  __shared__ CombineShared sh;
  // Launched early (launch_kernel): nothing before this reads memory. The next kernel, a dispatch
  // whose blocks fit two an SM, is placed only once this one is done: placed early on the SMs
  // that free first, it would double up there (protocol.md, "Kernel boundaries").
  await_prior_kernels(/*let_next_launch=*/false);
  ProfilerTrack prof(c.profiler, ProfilerEvent::kCombine);
  const EpBuffers b{c};
  const EpConfig& cfg = c.cfg;
  const uint64_t epoch = b.current_epoch();
  const int chunks = chunks_per_row(b.vecs_per_row());

  // The send half's items: every source's units (the most any source has). Every block of a launch
  // that sends loads them, also one that will only receive: which blocks send depends on them.
  int src_units = 0;
  if (sends(role)) {
    load_route_tokens(c, a.recv_route, sh.src_tokens);
    // Each source's parts, once: lane s of every wave (parts may divide; see gather_batch), kept by
    // wave 0's lane s for send_partials.
    src_units = max_over_sources(cfg.world, [&](int s) {
      const int parts = cfg.combine_parts(sh.src_tokens[s], chunks);
      if (wave_id() == 0) sh.src_parts[s] = parts;
      return cfg.num_groups(sh.src_tokens[s]) * parts;
    });
  }
  const int my_parts = receives(role) ? cfg.combine_parts(a.route.num_tokens, chunks) : 1;
  const int my_units = receives(role) ? cfg.num_groups(a.route.num_tokens) * my_parts : 0;
  const BlockShares share = block_shares(role, cfg.combine_sender_blocks(my_units, src_units));
  const HalfShare& send = share.send;
  const HalfShare& recv = share.recv;
  if (!send.runs) src_units = 0;
  // A launch that sends and receives sums this rank's own rows on the token side, where the sum is
  // needed, not through comb_x[me], from kOwnRowsDirectTokens on, when no peer has fewer than 3/4
  // of this rank's tokens (protocol.md, "Own rows"): its token side then waits for the peers'
  // partials of its units, and with more own tokens than a peer's it would wait idle while they
  // answer, then sum its own rows.
  const int tokens = a.route.num_tokens;
  bool own_direct = kOwnRows && role == Role::kBoth && tokens >= kOwnRowsDirectTokens && !cfg.flagged_partials(tokens);
  if (own_direct) {
    const int me = cfg.rank;
    own_direct =
        max_over_sources(cfg.world, [&](int s) { return s == me ? 0 : 3 * tokens - 4 * sh.src_tokens[s]; }) <= 0;
  }
  const uint32_t answered = all_ranks(cfg.world) & ~(own_direct ? 1u << cfg.rank : 0u);  // send half's sources

  if (send.runs) {
    // This rank's combine has started: every read of the round's earlier kernels here is done (its
    // dispatch, or the backward of combine), and an error so far (a bad route included) is in the
    // payload. The backward of dispatch waits for it before writing comb_x, and a token rank with
    // flagged partial sums or no units before its next round (receive_unit, await_every_start).
    // A relaxed store: the signal publishes no data, only reads that are done (the earlier kernels
    // completed before this one started, and a completed load has its value). A release's fence
    // held block 0's last wave about 1.1 us, and through the block's barriers its partial sums,
    // which the peers' token blocks then waited for (protocol.md, "Combine": the start signal).
    if (blockIdx.x == 0 && wave_id() == kWavesPerBlock - 1 && lane_id() < cfg.world)
      publish_relaxed(b.start_signal(lane_id(), cfg.rank), epoch, round_error_bit(b, epoch));
    if (a.await_ready && !await_every_start(b, sh, epoch, WaitSite::kDispatchGradReady)) return;  // engine failed
  }
  const auto send_step = [&](int u) {
    if (u < src_units) send_partials<kType, kWeightGrads>(b, a, sh, u, answered, epoch, prof);
  };
  // First this block's first unit, or, a sending block of a split, all of them. Then turns: send
  // the partials of this block's next unit of every source, receive its next unit (a block that
  // runs both halves receives unit u after sending u + G: every rank sent u's partials one turn
  // earlier), or, where every rank holds about the same tokens, the receive turn first
  // (receives_first).
  int next = send.first;  // this block's next unit to answer
  for (; next < src_units && (next == send.first || share.sends_first); next += send.stride) send_step(next);
  int u = recv.first;
  const bool balanced = kOwnRows && role == Role::kBoth && balanced_sources(cfg.world, sh.src_tokens);
  Turns turns{!receives_first(share.split, balanced)};
  while (u < my_units || next < src_units) {
    if (turns.next_sends(next < src_units, u < my_units)) {
      send_step(next);
      next += send.stride;
    } else {
      if (!receive_unit<kType, kWeightGrads>(b, a, sh, u, group_part(u, my_parts, chunks), own_direct, epoch, prof)) {
        return;
      }
      u += recv.stride;
    }
  }
  // A rank with no units of its own waited for no peer in this round (await_every_start).
  if (recv.runs && my_units == 0 && recv.first == 0 && !await_every_start(b, sh, epoch, WaitSite::kCombineStart))
    return;
  // Every block of the launch, also one that only sent, ends the round on its own counter.
  if (receives(role)) end_round(b);
}

template <TokenType kType, bool kWeightGrads>
void launch_combine_instance(const EpContext& ctx, const CombineArgs& args, Role role, hipStream_t stream) {
  const dim3 grid(ctx.cfg.num_blocks), block(kEpBlock);
  if (own_rows_instance(role, args.route.num_tokens))
    launch_kernel(combine_kernel<kType, true, kWeightGrads>, grid, block, stream, ctx.early_launch, ctx, args, role);
  else
    launch_kernel(combine_kernel<kType, false, kWeightGrads>, grid, block, stream, ctx.early_launch, ctx, args, role);
}

template <TokenType kType>
void launch_combine_kernel(const EpContext& ctx, const CombineArgs& args, Role role, hipStream_t stream) {
  if (args.sends_weight_grads)
    launch_combine_instance<kType, true>(ctx, args, role, stream);
  else
    launch_combine_instance<kType, false>(ctx, args, role, stream);
}

}  // namespace

void launch_combine(const EpContext& ctx, const CombineArgs& args, Role role, hipStream_t stream) {
  if (receives(role)) {
    MOE_A2A_CHECK(args.route.num_tokens >= 0 && args.route.num_tokens <= ctx.cfg.max_tokens, "combine: num_tokens ",
                  args.route.num_tokens, " outside [0, ", ctx.cfg.max_tokens, "]");
  }
  MOE_A2A_DISPATCH_TOKEN_TYPE(ctx.token_type, kType, (launch_combine_kernel<kType>(ctx, args, role, stream)));
}

}  // namespace moe_a2a
