// The backward of combine: one round, one kernel. For out[t] = sum_k w[t,k] * y(t,k):
//   grad y(t,k) = w[t,k] * grad_out[t]        (on the expert's rank, into grad_expert_y)
//   grad w[t,k] = <grad_out[t], y(t,k)>       (computed where y is, sent back to t's rank)
// Every block runs three steps: send_group for each of its token groups (token side, and the
// group's own rows of the expert side; then zero_rows_of_no_expert), answer_group for each of its
// items (expert side: group g of every peer, as the groups arrive, like dispatch's receive half,
// each answered group signalled back to its source), and receive_weight_grads for each of its
// token groups (token side, as the answers arrive). Block b takes groups b, b + B, ... in every
// step, so a group's own rows are answered in the block that reads their weight gradients.
// A rank whose topk_weights need no gradient passes grad_topk_weights = nullptr: its group
// signals say so, and the expert ranks skip its dot products (and their read of y).
// What each writes, publishes and waits for: docs/design/protocol.md (the table, and "Backward
// rounds").
#include "block_turns.cuh"
#include "ep_device.cuh"
#include "flagged_rows.cuh"

namespace moe_a2a {
namespace {

// send_group's split of a block's waves, where it answers the group's own rows while it sends:
// kMinGradSendWaves waves send (a quarter of the block: 2 of 8 on NVIDIA left the link as busy as
// 4 at 2048 tokens, 2 x H100), the others answer from the start, the senders joining them after.
inline constexpr int kMinGradSendWaves = kWavesPerBlock / 4 > 0 ? kWavesPerBlock / 4 : 1;

// Step 1's stores for tokens `tokens` of this rank, by waves [first_wave, first_wave + waves): each
// token's gradient to every peer it went to, into recv_x[me][t] there (by token, not by slot: the
// expert side finds it through the forward's route; this rank's own expert side reads grad_out
// itself).
MOE_A2A_DEVICE void store_group_grads(const EpBuffers& b, const CombineBackwardArgs& a, TokenRange tokens,
                                      int first_wave, int waves) {
  const EpConfig& cfg = b.c.cfg;
  const int me = cfg.rank;
  const uint32_t ranks = all_ranks(cfg.world);
  const int vecs = b.vecs_per_row();
  const int chunks = chunks_per_row(vecs);
  const Vec16* grad = static_cast<const Vec16*>(a.grad_out);
  for (int task = wave_id() - first_wave; task < (tokens.end - tokens.begin) * chunks; task += waves) {
    const int t = tokens.begin + task / chunks, chunk = task % chunks;
    const uint32_t mask = static_cast<uint32_t>(a.route.dest_mask[t]) & ranks & ~(1u << me);
    if (mask == 0) continue;
    Vec16 v[kUnroll];
    load_chunk(grad + static_cast<size_t>(t) * vecs, chunk, vecs, v);
    for (int r = 0; r < cfg.world; ++r) {
      if ((mask >> r) & 1u) store_chunk(b.recv_x(r, me, t), chunk, vecs, v);
    }
  }
}

// Whether this rank asks for its weight gradients (its router takes a gradient).
MOE_A2A_DEVICE MOE_A2A_INLINE bool asks_weight_grads(const CombineBackwardArgs& a) {
  return a.grad_topk_weights != nullptr;
}

// Signal k of group g (grad_signal: sub-range k, or k = 0 for the whole group) on every rank of
// `ranks`, also those that got no row (a payload of 1 asks for the group's weight gradients).
// Lanes 0 .. world - 1 of the calling wave; the stores it announces before it.
MOE_A2A_DEVICE void publish_group_grads(const EpBuffers& b, const CombineBackwardArgs& a, int g, int k, uint32_t ranks,
                                        uint64_t epoch) {
  const int r = lane_id();
  if (r < b.c.cfg.world && ((ranks >> r) & 1u)) {
    publish(b.grad_signal(r, b.c.cfg.rank, g, k), epoch, round_error_bit(b, epoch) | (asks_weight_grads(a) ? 1u : 0u));
  }
}

// The peers whose output gradients go in sub-ranges (EpConfig::grad_subranges), a bit each, from
// every rank's token count (src_tokens): those this rank sends in sub-ranges (to_peers), or those
// that send this rank theirs so (!to_peers).
MOE_A2A_DEVICE MOE_A2A_INLINE uint32_t subrange_peers(const EpConfig& cfg, int tokens, const int* src_tokens,
                                                      bool to_peers) {
  uint32_t peers = 0;
#pragma unroll 1
  for (int r = 0; r < cfg.world; ++r) {
    const int parts = to_peers ? cfg.grad_subranges(tokens, src_tokens[r]) : cfg.grad_subranges(src_tokens[r], tokens);
    if (r != cfg.rank && parts > 1) peers |= 1u << r;
  }
  return peers;
}

// The signals to the ranks in `ranks` that this rank answered their token group g (every read of
// their output gradients is done); their weight gradients, if asked, travel as flagged words to
// comb_w there. Relaxed: the signal publishes no data, so no fence waits for the block's stores
// (at 128 tokens on 2 x H100 that fence and the signal's flight were 3-4 us at the round's end,
// session 19). Threads 0 .. world - 1; the block's answers before it (a block barrier).
MOE_A2A_DEVICE void publish_weight_grads(const EpBuffers& b, uint32_t ranks, int g, uint64_t epoch) {
  const int r = static_cast<int>(threadIdx.x);
  if (r < b.c.cfg.world && ((ranks >> r) & 1u)) {
    publish_relaxed(b.wgrad_signal(r, b.c.cfg.rank, g), epoch, round_error_bit(b, epoch));
  }
}

// The waves of send_group that answer this rank's own rows of its group g from the start, while
// the others send the group; 0: every wave sends first. Where the group has a row for each of
// half the block's waves or more, all but kMinGradSendWaves answer, whatever the rows (they take
// parts of rows, answer_rows); with fewer rows the link goes first. The sending waves join the
// answers once their stores are out. 2 x H100, DeepSeek-V3, 512 tokens a rank (session 18, call 2):
// 76.1 us against 80.6 with a wave a row (4 answering) and 86.8 with every wave sending first.
MOE_A2A_DEVICE MOE_A2A_INLINE int own_answer_waves(const EpConfig& cfg, int tokens, int g) {
  const TokenRange own = cfg.token_group(tokens, g);
  const int rows = own.end - own.begin;
  if (g >= cfg.num_groups(tokens) || 2 * rows < kWavesPerBlock) return 0;
  return kWavesPerBlock - kMinGradSendWaves;
}

// Whether flat row `row` (packed: below the last expert's end) holds no (token, k): padded,
// past its expert's count; packed, in the alignment padding after an expert's rows. Rows fit
// in int: at most 256 local experts x 32768 padded rows, or 524288 + 256 x 1023 packed rows.
MOE_A2A_DEVICE bool row_of_no_expert(const EpContext& c, const CombineBackwardArgs& a, int row) {
  const EpConfig& cfg = c.cfg;
  if (!cfg.packed()) {
    const int e = row / cfg.expert_capacity;
    return row - e * cfg.expert_capacity >= a.expert_num_tokens[e];
  }
  int lo = 0, hi = experts_per_rank(c) - 1;  // the last expert whose segment starts at or before the row
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (a.expert_offsets[mid] <= row)
      lo = mid;
    else
      hi = mid - 1;
  }
  return row - a.expert_offsets[lo] >= a.expert_num_tokens[lo];
}

// Zero the rows of no expert that an expert's GEMM reads: padded, every row past an expert's
// count (a batched matmul reads the whole buffer); packed, the alignment padding inside the
// segments (a grouped GEMM reads its segment whole). Packed rows past the last segment are read
// by no expert and stay undefined, as they are in expert_x: at the default (worst-case)
// capacity they are about half the buffer, and zeroing them cost as many bytes as the gradient
// itself. Done before the wait for the peers' gradients, while they are on their way. A wave
// per row, so the which-row arithmetic is done once per row, not once per vector.
MOE_A2A_DEVICE void zero_rows_of_no_expert(const EpBuffers& b, const CombineBackwardArgs& a) {
  const EpConfig& cfg = b.c.cfg;
  if (cfg.packed() && cfg.expert_alignment == 1) return;  // segments without padding
  const int rows = cfg.packed() ? a.expert_offsets[experts_per_rank(b.c)] : static_cast<int>(output_rows(b.c));
  const int vecs = b.vecs_per_row();
  Vec16* grad_y = static_cast<Vec16*>(a.grad_expert_y);
  const int waves = gridDim.x * kWavesPerBlock;
  for (int row = blockIdx.x * kWavesPerBlock + wave_id(); row < rows; row += waves) {
    if (!row_of_no_expert(b.c, a, row)) continue;
    Vec16* dst = grad_y + static_cast<size_t>(row) * vecs;
    for (int i = lane_id(); i < vecs; i += kWaveSize) dst[i] = Vec16{0u, 0u, 0u, 0u};
  }
}

// y's rows that the answers read for the weight gradients, asked of L2 (prefetch_l2) in pieces
// spread over the blocks, a lane of the calling wave a piece, where they fit in y_prefetch_bytes
// (a third of L2: y, then grad y as the answers write it). Packed only, where they are one range,
// [0, expert_offsets[local]), and only where this rank asks for its weight gradients (the answers
// read y for the sources that ask; this rank's ask stands for theirs). The answers of the peers'
// rows start when their gradients land (at 128 tokens a rank on 2 x H100, about 9.5 us into the
// round) and then read y from L2, not HBM: the prefetch runs while the link drains. A hint: it
// changes no value. Called by one wave of each block once its first sends are out; its load of
// the offsets holds only that wave, whose answer tasks the others take meanwhile. Session 22: 128
// tokens drawn 27.9 -> 26.7 us at world 2, 46.3 -> 44.6 every rank at world 4 (4 x H200); none where
// HBM is busy anyway, every rank at 128 at world 2 (protocol.md, "y asked of L2").
MOE_A2A_DEVICE void prefetch_y(const EpContext& c, const CombineBackwardArgs& a) {
  constexpr int kPieceShift = 14;  // 16 KB a piece
  if (c.y_prefetch_bytes == 0 || !c.cfg.packed() || !asks_weight_grads(a)) return;
  const size_t bytes = static_cast<size_t>(a.expert_offsets[experts_per_rank(c)]) * c.cfg.row_bytes();
  if (bytes == 0 || bytes > c.y_prefetch_bytes) return;
  const uint32_t size = static_cast<uint32_t>(bytes);  // a third of L2 fits
  const uint32_t pieces = (size + (1u << kPieceShift) - 1) >> kPieceShift;
  const auto* y = static_cast<const uint8_t*>(a.expert_y);
  for (uint32_t piece = blockIdx.x + gridDim.x * lane_id(); piece < pieces; piece += gridDim.x * kWaveSize) {
    const uint32_t at = piece << kPieceShift;
    prefetch_l2(y + at, min(1u << kPieceShift, size - at));
  }
}

// About how many tasks answer_rows splits a group's rows into, handed out as waves ask: a row's
// chunks in parts small enough that a wave that comes late (send_group's senders) still finds
// some and that rows with more k's here than others do not hold the block. Eight a wave: at 2048
// tokens a rank (16 rows a group, 2 x H100, session 18 call 4) 225.6-227.8 us against 231.4-231.7
// with four a wave and 234.9-236.8 with the peers' rows in fixed shares; the same at 128 and 512.
inline constexpr int kRowTasks = 8 * kWavesPerBlock;

// answer_group's items: source s's signal k is item s * kGradSubRanges + k, one lane each and one
// bit each of await_some_signals' 32-bit item mask (a wave has 32 or 64 lanes).
static_assert(kMaxWorld * kGradSubRanges <= 32, "a 32-bit mask and a wave hold every item of a group");
static_assert(kMaxTopk <= 32, "slot_here holds a bit per k");

struct CombineBackwardShared {
  int src_tokens[kMaxWorld];
  uint32_t payload[kMaxWorld * kGradSubRanges];       // per answer_group item, or per rank
  TokenRange item_slots[kMaxWorld * kGradSubRanges];  // answer_group: the slots of each item
  // answer_rows with a row split into parts (a group of fewer slots than tasks): each task's
  // per-k dot products of its part, and each slot's token (-1: none) and k's here.
  float part_dot[kRowTasks][kMaxTopk];
  int slot_token[kRowTasks];
  uint32_t slot_here[kRowTasks];
  uint32_t tasks_taken;                 // answer_rows: its tasks handed out so far (0 between calls)
  uint32_t sent_waves[kGradSubRanges];  // send_group: the sending waves done with each sub-range's stores
};

// answer_rows' next task for the calling wave, out of the block's shared count (one relaxed
// block-scope add by lane 0), so that the waves free first take the next ones.
MOE_A2A_DEVICE MOE_A2A_INLINE int take_task(uint32_t* taken) {
  uint32_t task = 0;
  if (lane_id() == 0) task = atomic_add_relaxed_block(taken, 1u);
  return static_cast<int>(wave_shfl(task, 0));
}

// The (row, k)s of a row whose y chunks answer_row_chunks loads at once.
inline constexpr int kGradsInFlight = 4;

// A task of answer_rows: the chunks [first, end) of one row, for every k of it whose expert is
// here. Lane k holds (row, k)'s position in expert_y (-1: none here) and its weight; the gradient's
// chunk is loaded once for all of them, and the y chunks of kGradsInFlight of them at once. Returns,
// in lane k, (row, k)'s dot product over these chunks, when weight_grad: each lane sums its own
// products over the chunks, in chunk order, and one wave sum a (row, k) ends the task (a wave sum
// a chunk was five dependent shuffles on every chunk's path).
template <TokenType kType>
MOE_A2A_DEVICE float answer_row_chunks(const Vec16* grad_out, const Vec16* y, Vec16* grad_y, int p, float w, int first,
                                       int end, int vecs, bool weight_grad) {
  const LaneMask here = wave_ballot(p >= 0);
  const int n = popcount(here);
  float dot = 0.0f;
  for (int k0 = 0; k0 < n; k0 += kGradsInFlight) {
    size_t row[kGradsInFlight];
    float weight[kGradsInFlight], sum[kGradsInFlight];
    int lane[kGradsInFlight];
#pragma unroll
    for (int q = 0; q < kGradsInFlight; ++q) {
      lane[q] = k0 + q < n ? nth_set_bit(here, k0 + q) : 0;
      row[q] = static_cast<size_t>(wave_shfl(p, lane[q])) * vecs;
      weight[q] = wave_shfl(w, lane[q]);
      sum[q] = 0.0f;
    }
    for (int chunk = first; chunk < end; ++chunk) {
      Vec16 g[kUnroll], yv[kGradsInFlight][kUnroll];
      load_chunk(grad_out, chunk, vecs, g);
#pragma unroll
      for (int q = 0; q < kGradsInFlight; ++q) {
        if (weight_grad && k0 + q < n) load_chunk(y + row[q], chunk, vecs, yv[q]);
      }
#pragma unroll
      for (int q = 0; q < kGradsInFlight; ++q) {
        if (k0 + q >= n) break;
        Vec16 out[kUnroll];
        float d = 0.0f;
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          if (chunk * kChunkVecs + lane_id() + u * kWaveSize >= vecs) continue;  // lanes past the row
          if (weight_grad) d += dot_vec<kType>(g[u], yv[q][u]);
          float acc[8] = {};
          fma_vec<kType>(acc, weight[q], g[u]);
          out[u] = pack_vec<kType>(acc);
        }
        store_chunk(grad_y + row[q], chunk, vecs, out);
        if (weight_grad) sum[q] += d;
      }
    }
#pragma unroll
    for (int q = 0; q < kGradsInFlight; ++q) {
      if (k0 + q >= n) break;  // n is the same in every lane: the wave sums' shuffles see every lane
      const float total = weight_grad ? wave_sum(sum[q]) : 0.0f;
      if (lane_id() == lane[q]) dot = total;
    }
  }
  return dot;
}

// Step 2 for the slots of source src's token group (its slots are the group's token range, the
// rows first, then empty slots: dispatch's numbering), by every wave of the block. Tasks (slot,
// part), each to whichever wave asks first (take_task): a part is a range of the row's chunks,
// more than one where the group has fewer than kRowTasks slots (at one token, a chunk a task).
// A task writes every grad y(row, k) here from one load of the gradient. The weight gradient of a
// (row, k) is the sum over its parts, in order, of each part's dot product (answer_row_chunks):
// the same for the same token count, whatever the timing. Without weight_grad (the source asked
// for none), y, the round's largest read, is not loaded. Ends with a block barrier.
template <TokenType kType>
MOE_A2A_DEVICE void answer_rows(const EpBuffers& b, const CombineBackwardArgs& a, CombineBackwardShared& sh, int src,
                                TokenRange slots, bool weight_grad, uint32_t flag) {
  const EpConfig& cfg = b.c.cfg;
  const int me = cfg.rank;
  const int vecs = b.vecs_per_row();
  const int chunks = chunks_per_row(vecs);
  const size_t out_rows = output_rows(b.c);
  const int n = slots.end - slots.begin;
  const int parts = n > 0 && n < kRowTasks ? min(chunks, kRowTasks / n) : 1;
  for (int task = take_task(&sh.tasks_taken); task < n * parts; task = take_task(&sh.tasks_taken)) {
    const int i = task / parts, part = task % parts;
    const size_t row = b.row_index(src, slots.begin + i);
    const int token = a.recv_route.token[row];
    // An empty slot sends nothing; nor does a token of this rank's own past its count (its
    // gradients are read where they are: store_group_grads sends them nowhere).
    const bool used = token >= 0 && token < cfg.max_tokens && !(src == me && token >= a.route.num_tokens);
    int p = -1;
    bool dropped = false;  // k's expert is here but had no row left: its weight gradient is 0
    if (used && lane_id() < cfg.topk) {
      p = a.recv_route.pos[row * cfg.topk + lane_id()];
      dropped = p == kDroppedPair;
      if (static_cast<size_t>(p) >= out_rows) p = -1;  // k's expert is on another rank (also p < 0)
    }
    // No weights: a combine of the weights-at-experts layout summed its rows unweighted.
    const float w = p < 0 ? 0.0f : a.expert_weights != nullptr ? a.expert_weights[p] : 1.0f;
    const Vec16* grad_out = !used       ? nullptr
                            : src == me ? static_cast<const Vec16*>(a.grad_out) + static_cast<size_t>(token) * vecs
                                        : b.recv_x(me, src, token);
    const float dot =
        answer_row_chunks<kType>(grad_out, static_cast<const Vec16*>(a.expert_y), static_cast<Vec16*>(a.grad_expert_y),
                                 p, w, part * chunks / parts, (part + 1) * chunks / parts, vecs, weight_grad);
    if (!weight_grad) continue;
    // Every used pair whose expert is here gets its word (the token rank awaits each); a dropped
    // one's dot is 0 (answer_row_chunks gives a product only where p >= 0).
    const bool answers = p >= 0 || dropped;
    if (parts == 1) {
      if (answers) st_relaxed_sys(b.comb_w(src, token) + lane_id(), with_round_flag(__float_as_uint(dot), flag));
      continue;
    }
    if (lane_id() < cfg.topk) sh.part_dot[task][lane_id()] = dot;
    const LaneMask here = wave_ballot(answers);
    if (part == 0 && lane_id() == 0) {
      sh.slot_token[i] = token;
      sh.slot_here[i] = static_cast<uint32_t>(here);  // lanes below topk
    }
  }
  __syncthreads();  // every task done (its part's dot products in sh.part_dot), none taken after
  if (weight_grad && parts > 1) {
    for (int j = threadIdx.x; j < n * cfg.topk; j += blockDim.x) {
      const auto [i, k] = pair_of(b.c, j);
      if (((sh.slot_here[i] >> k) & 1u) == 0) continue;
      float dot = 0.0f;
      for (int part = 0; part < parts; ++part) dot += sh.part_dot[i * parts + part][k];
      st_relaxed_sys(b.comb_w(src, sh.slot_token[i]) + k, with_round_flag(__float_as_uint(dot), flag));
    }
  }
  if (threadIdx.x == 0) sh.tasks_taken = 0;
  __syncthreads();  // sh.part_dot and sh.tasks_taken are the next call's
}

// Step 1 for token group g of this rank: its gradients to the peers, then its signal; and the
// group's own rows (step 2 for this rank as the source), whose tasks the waves take as they come
// free (answer_rows). Where own_answer_waves says so, the block's waves split: the first ones send
// (the link), the others answer from the start (HBM), and the last sending wave to finish
// publishes once every sending wave's stores are acknowledged, so that the peers do not wait for
// the answers; otherwise every wave sends, then wave 0 publishes. Either way the sending waves
// then join the answers: the release waits for the link to drain (about 7 us at 128 tokens on
// 2 x H100), and with a wave a row the answers were a chain of one chunk's loads after another
// (session 18: the own rows of 4 tokens took 30-48 us on 4 waves while 4 senders idled from 20 us).
// The block's first group also asks L2 for y (prefetch_y): its last wave, once the sends are out
// (or at once where it answers from the start).
template <TokenType kType, bool kSubRanges>
MOE_A2A_DEVICE void send_group(const EpBuffers& b, const CombineBackwardArgs& a, CombineBackwardShared& sh, int g,
                               uint32_t split_peers, uint64_t epoch, ProfilerTrack& prof) {
  if constexpr (!kSubRanges) split_peers = 0;  // the instance without the sub-ranges' code: the compiler drops it
  const TokenRange own = b.c.cfg.token_group(a.route.num_tokens, g);
  const int answering = own_answer_waves(b.c.cfg, a.route.num_tokens, g);
  const int sending = kWavesPerBlock - answering;
  const uint32_t whole_group = all_ranks(b.c.cfg.world) & ~split_peers;  // one signal, k = 0, after every store
  if (threadIdx.x < kGradSubRanges) sh.sent_waves[threadIdx.x] = 0;
  __syncthreads();
  if (answering == 0) {
    {
      ProfilerSpan send_span(prof, ProfilerEvent::kCombineBackwardSend, g);
      store_group_grads(b, a, own, 0, kWavesPerBlock);
    }
    __syncthreads();  // every thread's stores of the group before each signal's release
    if (wave_id() == 0) {
      for (int k = 0; split_peers != 0 && k < kGradSubRanges; ++k) publish_group_grads(b, a, g, k, split_peers, epoch);
      publish_group_grads(b, a, g, 0, whole_group, epoch);
    }
  } else if (wave_id() < sending) {
    // With split_peers, the group's tokens in kGradSubRanges sub-ranges, each announced to them as
    // soon as its stores are acknowledged: those peers answer it while the next is on the link.
    const int parts = split_peers != 0 ? kGradSubRanges : 1;
#pragma unroll 1
    for (int k = 0; k < parts; ++k) {
      {
        ProfilerSpan send_span(prof, ProfilerEvent::kCombineBackwardSend, g);
        store_group_grads(b, a, parts == 1 ? own : EpConfig::grad_subrange(own, k), 0, sending);
      }
      fence_acq_rel_sys();                             // each lane's stores acknowledged
      const bool lanes_past = wave_ballot(true) != 0;  // a wave barrier: every lane past its fence
      uint32_t prior = 0;
      if (lanes_past && lane_id() == 0) prior = atomic_add_relaxed_block(&sh.sent_waves[k], 1u);
      if (wave_shfl(prior, 0) == static_cast<uint32_t>(sending - 1)) {
        fence_acq_rel_sys();  // acquire side: the other sending waves' stores before the signal
        if (split_peers != 0) publish_group_grads(b, a, g, k, split_peers, epoch);
        if (k == parts - 1) publish_group_grads(b, a, g, 0, whole_group, epoch);
      }
    }
  }
  if (wave_id() == kWavesPerBlock - 1 && g == static_cast<int>(blockIdx.x)) prefetch_y(b.c, a);
  {
    ProfilerSpan answer_span(prof, ProfilerEvent::kCombineBackwardAnswer, b.c.cfg.rank);
    answer_rows<kType>(b, a, sh, b.c.cfg.rank, own, asks_weight_grads(a), round_flag(epoch));
  }  // answer_rows' last barrier: no wave reads sh.sent_waves after it
}

// The slots of each item of source s's token group g (sh.item_slots): the whole group where s
// sends it in one piece; in sub-ranges, the slots whose rows hold the sub-range's tokens. A
// group's rows fill its first slots in token order (dispatch's number_slots), so a sub-range of
// tokens is a range of slots: counted from the route's tokens by wave 0 in one pass, kGradSubRanges
// ballots a wave of slots. Every thread calls it (a block barrier at the end).
MOE_A2A_DEVICE void locate_items(const EpBuffers& b, const CombineBackwardArgs& a, CombineBackwardShared& sh, int g,
                                 uint32_t sources, uint32_t split_sources) {
  const EpConfig& cfg = b.c.cfg;
  if (wave_id() == 0) {
#pragma unroll 1
    for (int s = 0; s < cfg.world; ++s) {
      if (((sources >> s) & 1u) == 0) continue;
      const TokenRange group = cfg.token_group(sh.src_tokens[s], g);
      const int parts = (split_sources >> s) & 1u ? kGradSubRanges : 1;
      if (parts == 1) {
        if (lane_id() == 0) sh.item_slots[s * kGradSubRanges] = group;
        continue;
      }
      int below[kGradSubRanges + 1] = {};  // rows whose token is below sub-range k's first; [parts]: every row
      for (int slot = group.begin + lane_id(); slot - lane_id() < group.end; slot += kWaveSize) {
        const int token = slot < group.end ? a.recv_route.token[b.row_index(s, slot)] : -1;
#pragma unroll
        for (int k = 1; k <= kGradSubRanges; ++k) {
          const int bound = k < parts ? EpConfig::grad_subrange(group, k).begin : group.end;
          below[k] += popcount(wave_ballot(token >= 0 && (k == parts ? true : token < bound)));
          if (k == parts) break;
        }
      }
#pragma unroll
      for (int k = 0; k < kGradSubRanges; ++k) {  // unrolled: `below` stays in registers
        if (k < parts && lane_id() == k)
          sh.item_slots[s * kGradSubRanges + k] = {group.begin + below[k], group.begin + below[k + 1]};
      }
    }
  }
  __syncthreads();
}

// Step 2 for token group g of every source that has one, whatever has arrived in one batch, until
// every source's group is in: its items are each source's signals of the group (one, or one per
// sub-range: EpConfig::grad_subranges), and a source is signalled back as soon as its last item
// is answered. A peer with no tokens has no group to answer: block 0 signals its group 0 at
// once, so that its round too ends on a signal from this rank (protocol.md, "Why nothing is
// overwritten too early"). False after a timeout.
template <TokenType kType, bool kSubRanges>
MOE_A2A_DEVICE bool answer_group(const EpBuffers& b, const CombineBackwardArgs& a, CombineBackwardShared& sh, int g,
                                 uint32_t split_sources, uint64_t epoch, ProfilerTrack& prof) {
  const EpConfig& cfg = b.c.cfg;
  const uint32_t peers = peer_ranks(cfg);
  uint32_t sources = sources_with_group(cfg, sh.src_tokens, g);
  if (g == 0) publish_weight_grads(b, peers & ~sources, 0, epoch);
  sources &= ~(1u << cfg.rank);  // this rank's own rows of the group: send_group answered them
  // Item s * kItems + k: source s's signal k. Without the sub-ranges' code an item is a source.
  constexpr int kItems = kSubRanges ? kGradSubRanges : 1;
  constexpr uint32_t kSourceItems = (1u << kItems) - 1u;
  uint32_t pending = sources;
  if constexpr (kSubRanges) {
    pending = 0;
#pragma unroll 1
    for (int s = 0; s < cfg.world; ++s) {
      if ((sources >> s) & 1u) pending |= ((split_sources >> s) & 1u ? kSourceItems : 1u) << (s * kItems);
    }
  }
  while (pending != 0) {
    const auto signal = [&](int i) { return b.grad_signal(cfg.rank, i / kItems, g, i % kItems); };
    const auto source_of = [](int i) { return i / kItems; };
    const uint64_t wait_start = prof.now();
    const uint32_t arrived = await_some_signals(b.c, signal, pending, cfg.world * kItems, source_of, epoch,
                                                WaitSite::kOutputGrad, g, sh.payload);
    if (arrived == 0) return false;
    // the wait's peer: the source of the lowest item of those that ended it
    if (wave_id() == 0)
      prof.record(ProfilerEvent::kCombineBackwardWait, wait_start, source_of(__ffs(static_cast<int>(arrived)) - 1));
    pending &= ~arrived;
    uint32_t done = arrived;  // the sources whose last item was in this batch
    if constexpr (kSubRanges) {
      uint32_t from = 0;  // the sources of the items that arrived
#pragma unroll 1
      for (int s = 0; s < cfg.world; ++s) {
        if ((arrived >> (s * kItems)) & kSourceItems) from |= 1u << s;
      }
      locate_items(b, a, sh, g, from, split_sources);
      done = 0;
#pragma unroll 1
      for (int s = 0; s < cfg.world; ++s) {
        if (((from >> s) & 1u) && ((pending >> (s * kItems)) & kSourceItems) == 0) done |= 1u << s;
      }
    }
#pragma unroll 1
    for (int i = 0; i < cfg.world * kItems; ++i) {
      if ((arrived >> i) & 1u) {
        const TokenRange slots = kSubRanges ? sh.item_slots[i] : cfg.token_group(sh.src_tokens[i], g);
        ProfilerSpan answer_span(prof, ProfilerEvent::kCombineBackwardAnswer, source_of(i));
        answer_rows<kType>(b, a, sh, source_of(i), slots, (sh.payload[i] & kFlagCountMask) != 0, round_flag(epoch));
      }
    }
    __syncthreads();  // every answer's reads before the signals; sh.payload is rewritten by the next wait
    publish_weight_grads(b, done & peers, g, epoch);
  }
  return true;
}

// Step 3 for this rank's token group g (group 0 at a rank with no tokens): waits for every peer's
// answers to it, then writes the group's weight gradients, if asked. The group's own rows were
// answered in this block (send_group or answer_group). The waits end the round, so they run
// whether or not this rank asked for weight gradients (protocol.md, "Why nothing is overwritten
// too early"). False after a timeout.
MOE_A2A_DEVICE bool receive_weight_grads(const EpBuffers& b, const CombineBackwardArgs& a, CombineBackwardShared& sh,
                                         int g, uint64_t epoch, ProfilerTrack& prof) {
  const EpConfig& cfg = b.c.cfg;
  const int me = cfg.rank;
  const auto signal = [&](int src) { return b.wgrad_signal(me, src, g); };
  const uint64_t wait_start = prof.now();
  if (!await_ranks(b.c, signal, peer_ranks(cfg), epoch, WaitSite::kWeightGrad, g, sh.payload)) return false;
  prof.record_wait(ProfilerEvent::kCombineBackwardWaitWeights, wait_start, cfg.world);
  if (!asks_weight_grads(a) || a.route.num_tokens == 0) return true;
  // A peer that failed this round may not have answered every pair: the host raises its error,
  // and no word of it is awaited.
  bool peer_failed = false;
  for (int r = 0; r < cfg.world; ++r) peer_failed |= r != me && (sh.payload[r] & kFlagErrorBit) != 0;
  if (peer_failed) return true;
  // The signals were relaxed: each pair's word may land after them, so it is awaited by its flag.
  const bool arrived =
      await_weight_grads(b, a.route, a.grad_topk_weights, cfg.token_group(a.route.num_tokens, g), round_flag(epoch));
  // Which peer answers pair (t, k) is not known here (dest_mask names ranks, not slots): peer -1.
  if (!arrived) {
    report_error(b.c, ErrorCode::kTimeout, -1, static_cast<int>(WaitSite::kWeightGrad), g,
                 signal_epoch(signal_word(epoch, 0)), 0);
  }
  return __syncthreads_and(arrived) != 0;  // every thread goes on to end_round, or none
}

// kSubRanges (EpConfig::grad_subranges_possible): the instance with the code of the sub-ranges.
// Without it, the kernel is the code a launch of small groups runs and nothing more: with the
// sub-ranges' 11 KB in it, such a launch (which never splits) took 3-5 us more at 128 tokens on
// 2 x H100 (session 20; protocol.md, "Code size").
template <TokenType kType, bool kSubRanges>
__global__ void __launch_bounds__(kEpBlock) combine_backward_kernel(EpContext c_passed, CombineBackwardArgs a_passed) {
  MOE_A2A_READ_IN_PLACE(c, a);  // c and a, where the launch put them (AMD: no copy in scratch)
  __shared__ CombineBackwardShared sh;
  if (threadIdx.x == 0) sh.tasks_taken = 0;  // before a barrier: send_group's first, or await_some_signals'
  ProfilerTrack prof(c.profiler, ProfilerEvent::kCombineBackward);
  const EpBuffers b{c};
  const uint64_t epoch = b.current_epoch();
  const int block = static_cast<int>(blockIdx.x), blocks = static_cast<int>(gridDim.x);
  if constexpr (!kSubRanges) {
    // Every block sends all its groups before it waits for any. Written apart from the other
    // instance's loop: the same loop here grew this instance by 5 KB, whose code runs cold at a few
    // tokens (protocol.md, "Code size"), and even num_groups hoisted into a variable grows it.
    for (int g = block; g < b.c.cfg.num_groups(a.route.num_tokens); g += blocks)
      send_group<kType, kSubRanges>(b, a, sh, g, 0u, epoch, prof);
    if (wave_id() == kWavesPerBlock - 1 && block >= b.c.cfg.num_groups(a.route.num_tokens)) prefetch_y(b.c, a);
    zero_rows_of_no_expert(b, a);
    load_route_tokens(b.c, a.recv_route, sh.src_tokens);
    // Of any source: the most groups (num_groups grows with the count); at least group 0, whose
    // block signals the peers with no tokens.
    const int most_tokens = max_over_sources(b.c.cfg.world, [&](int s) { return sh.src_tokens[s]; });
    for (int g = block; g < max(1, b.c.cfg.num_groups(most_tokens)); g += blocks) {
      if (!answer_group<kType, kSubRanges>(b, a, sh, g, 0u, epoch, prof)) return;  // timed out: engine failed
    }
  } else {
    // Where this rank's groups are large enough to go in sub-ranges, the peers' counts decide to
    // whom (EpConfig::grad_subranges), and where a block sends more than one group, whether it
    // takes turns (below), so they are read before the sends; plainly: load_route_tokens, after
    // the sends as ever, checks them and reports a bad route.
    const int my_groups = b.c.cfg.num_groups(a.route.num_tokens);
    const bool may_split = b.c.cfg.grad_subranges(a.route.num_tokens, 0) > 1;
    const bool takes_turns = my_groups > blocks;
    if (may_split || takes_turns) {
      if (threadIdx.x < b.c.cfg.world) sh.src_tokens[threadIdx.x] = a.recv_route.src_tokens[threadIdx.x];
      __syncthreads();
    }
    const uint32_t split_peers = may_split ? subrange_peers(b.c.cfg, a.route.num_tokens, sh.src_tokens, true) : 0u;
    const bool answers_between =
        takes_turns && receives_first(/*split=*/false, balanced_sources(b.c.cfg.world, sh.src_tokens));
    // This block's first group goes before any answer; then, where every rank holds about the same
    // tokens, odd blocks answer one group between two sends (receives_first), and the others send
    // one group ahead of their answers, as dispatch and combine take turns (Turns). Group g of every
    // source is sent before any block waits for it, so every wait ends. One call site each: a second
    // send_group added 44 KB.
    int next = block, to_answer = block;  // this block's next group to send, to answer
    // Of any source: the most groups, at least group 0 (peers with no tokens), known from this
    // block's first answer turn on (load_route_tokens); until then a turn to answer is always left.
    int answered_groups = INT_MAX;
    uint32_t split_sources = 0;
    Turns turns{true};
    while (next < my_groups || to_answer < answered_groups) {
      if (turns.next_sends(next < my_groups, to_answer < answered_groups)) {
        send_group<kType, kSubRanges>(b, a, sh, next, split_peers, epoch, prof);
        if (next == block) turns = Turns{!answers_between};  // after the first group, the turns
        next += blocks;
        continue;
      }
      if (answered_groups == INT_MAX) {  // this block's first answer turn
        if (wave_id() == kWavesPerBlock - 1 && block >= my_groups) prefetch_y(b.c, a);
        zero_rows_of_no_expert(b, a);
        load_route_tokens(b.c, a.recv_route, sh.src_tokens);
        split_sources = subrange_peers(b.c.cfg, a.route.num_tokens, sh.src_tokens, false);
        const int most_tokens = max_over_sources(b.c.cfg.world, [&](int s) { return sh.src_tokens[s]; });
        answered_groups = max(1, b.c.cfg.num_groups(most_tokens));
        if (to_answer >= answered_groups) continue;
      }
      if (!answer_group<kType, kSubRanges>(b, a, sh, to_answer, split_sources, epoch, prof)) return;  // timed out
      to_answer += blocks;
    }
  }
  for (int g = block; g < max(1, b.c.cfg.num_groups(a.route.num_tokens)); g += blocks) {
    if (!receive_weight_grads(b, a, sh, g, epoch, prof)) return;
  }
  end_round(b);
}

// Every rank of an engine picks the same instance (one EpConfig): a sender of sub-ranges needs a
// receiver that waits for them.
template <TokenType kType>
void launch_combine_backward_kernel(const EpContext& ctx, const CombineBackwardArgs& args, hipStream_t stream) {
  if (ctx.cfg.grad_subranges_possible())
    combine_backward_kernel<kType, true><<<ctx.cfg.num_blocks, kEpBlock, 0, stream>>>(ctx, args);
  else
    combine_backward_kernel<kType, false><<<ctx.cfg.num_blocks, kEpBlock, 0, stream>>>(ctx, args);
}

}  // namespace

void launch_combine_backward(const EpContext& ctx, const CombineBackwardArgs& args, hipStream_t stream) {
  MOE_A2A_CHECK(args.route.num_tokens >= 0 && args.route.num_tokens <= ctx.cfg.max_tokens,
                "combine backward: num_tokens ", args.route.num_tokens, " outside [0, ", ctx.cfg.max_tokens, "]");
  MOE_A2A_DISPATCH_TOKEN_TYPE(ctx.token_type, kType, launch_combine_backward_kernel<kType>(ctx, args, stream));
  MOE_A2A_GPU_CHECK(hipGetLastError());
}

}  // namespace moe_a2a
