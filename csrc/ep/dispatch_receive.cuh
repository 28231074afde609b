// Dispatch's receive half: the expert segments from every source's counts (receive_counts), then each
// (group, part) item (receive_part, place_rows), items past a block's first drawn (draw_item).
// docs/design/protocol.md, "Dispatch" and "Receive items". Part of dispatch.cu, included by it only.
#pragma once

#include "dispatch_shared.cuh"
#include "flagged_rows.cuh"
#include "fp8_rows.cuh"

namespace moe_a2a {
namespace {  // part of dispatch.cu, its only includer: internal linkage as there

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

}  // namespace
}  // namespace moe_a2a
