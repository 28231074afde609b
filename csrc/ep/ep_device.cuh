// Device helpers shared by the EP kernels: named accessors for every buffer region, the
// round's epoch, error reporting, signals (publish, wait for all, wait for any), token groups and
// routes. The protocol these implement is docs/design/protocol.md. Token vectors are in
// token_vectors.cuh, what each block of a launch takes in block_turns.cuh.
#pragma once

#include <cstdint>

#include "moe_a2a/ep/kernels.h"
#include "moe_a2a/platform/device.h"
#include "moe_a2a/platform/launch.h"
#include "moe_a2a/platform/sync.h"
#include "token_vectors.cuh"

namespace moe_a2a {

inline constexpr int kEpBlock = kBlockThreads;  // threads per block of every EP kernel
inline constexpr int kWavesPerBlock = kEpBlock / kWaveSize;
// Rows whose per-row metadata a block stages in shared memory before moving their chunks.
inline constexpr int kRowBatch = 32;

// cfg.experts_per_rank() and cfg.owner_rank(expert), and pair j of a token-major (token, k) list as
// its token and k: from the context's divisors (divisor.h), with no integer division.
MOE_A2A_DEVICE MOE_A2A_INLINE int experts_per_rank(const EpContext& c) { return c.local_experts.d; }
// cfg.output_rows(), likewise (padded: local experts x capacity, whose count is a division there).
MOE_A2A_DEVICE MOE_A2A_INLINE size_t output_rows(const EpContext& c) {
  return c.cfg.packed() ? static_cast<size_t>(c.cfg.expert_capacity)
                        : static_cast<size_t>(c.local_experts.d) * static_cast<size_t>(c.cfg.expert_capacity);
}
MOE_A2A_DEVICE MOE_A2A_INLINE int owner_rank_of(const EpContext& c, int32_t expert) {
  return c.local_experts.quotient(expert);
}
struct PairIndex {
  int token, k;
};
MOE_A2A_DEVICE MOE_A2A_INLINE PairIndex pair_of(const EpContext& c, int j) {
  const int token = c.topk.quotient(j);
  return PairIndex{token, j - token * c.topk.d};
}

MOE_A2A_DEVICE MOE_A2A_INLINE int popcount(LaneMask m) { return __popcll(static_cast<unsigned long long>(m)); }
// Lanes below this one.
MOE_A2A_DEVICE MOE_A2A_INLINE LaneMask lanes_below() { return (static_cast<LaneMask>(1) << lane_id()) - 1; }
// The index of the i-th set bit of m (i counted from 0; m has more than i bits set).
MOE_A2A_DEVICE MOE_A2A_INLINE int nth_set_bit(uint64_t m, int i) {
#pragma unroll 1  // unrolled it was 16 KB of combine's code ("Code size" in protocol.md); i is small
  for (int j = 0; j < i; ++j) m &= m - 1;
  return __ffsll(static_cast<long long>(m)) - 1;
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
    return reinterpret_cast<Vec16*>(heap_region(owner, c.heap_layout.recv_x) +
                                    row_index(src, slot) * c.cfg.row_bytes());
  }
  MOE_A2A_DEVICE int32_t* recv_token(int owner, int src, int slot) const {
    return reinterpret_cast<int32_t*>(heap_region(owner, c.heap_layout.recv_token)) + row_index(src, slot);
  }
  MOE_A2A_DEVICE int32_t* recv_expert(int owner, int src, int slot) const {
    return reinterpret_cast<int32_t*>(heap_region(owner, c.heap_layout.recv_expert)) +
           row_index(src, slot) * c.cfg.topk;
  }
  MOE_A2A_DEVICE float* recv_weight(int owner, int src, int slot) const {
    return reinterpret_cast<float*>(heap_region(owner, c.heap_layout.recv_weight)) + row_index(src, slot) * c.cfg.topk;
  }
  // On rank `owner`: rank `src`'s counts, flagged words (csrc/ep/flagged_rows.cuh): the (token,
  // k) pairs it sent to each of owner's local experts, then its token count (config.h).
  MOE_A2A_DEVICE uint64_t* recv_count(int owner, int src) const {
    return reinterpret_cast<uint64_t*>(heap_region(owner, c.heap_layout.recv_count)) +
           static_cast<size_t>(src) * (experts_per_rank(c) + 1);
  }
  // On rank `owner`: the partial sum that expert rank `src` returned for owner's token `token`.
  MOE_A2A_DEVICE Vec16* comb_x(int owner, int src, int token) const {
    return reinterpret_cast<Vec16*>(heap_region(owner, c.heap_layout.comb_x) +
                                    row_index(src, token) * c.cfg.row_bytes());
  }
  // On rank `owner`: comb_x(owner, src, token) as a flagged row (csrc/ep/flagged_rows.cuh), for
  // a token rank with few tokens (EpConfig::flagged_partials).
  MOE_A2A_DEVICE uint64_t* comb_flagged(int owner, int src, int token) const {
    const size_t index = static_cast<size_t>(src) * c.cfg.flagged_tokens() + token;
    return reinterpret_cast<uint64_t*>(heap_region(owner, c.heap_layout.comb_flagged) +
                                       index * c.cfg.flagged_row_bytes());
  }
  // On rank `owner`: the gradient of owner's router weight (token, k), [max_tokens][topk], each a
  // flagged word (its fp32 bits with the round's flag: csrc/ep/flagged_rows.cuh; 0 once read).
  MOE_A2A_DEVICE uint64_t* comb_w(int owner, int token) const {
    return reinterpret_cast<uint64_t*>(heap_region(owner, c.heap_layout.comb_w)) +
           static_cast<size_t>(token) * c.cfg.topk;
  }
  // Signals on rank `owner` written by rank `src` (see config.h), `per_src` of them per source.
  MOE_A2A_DEVICE Signal* signals(int owner, size_t region, int src, int per_src, int i) const {
    return reinterpret_cast<Signal*>(heap_region(owner, region)) + static_cast<size_t>(src) * per_src + i;
  }
  MOE_A2A_DEVICE Signal* group_signal(int owner, int src, int g) const {
    return signals(owner, c.heap_layout.group_signal, src, c.cfg.max_groups(), g);
  }
  MOE_A2A_DEVICE Signal* partial_signal(int owner, int src, int unit) const {
    return signals(owner, c.heap_layout.partial_signal, src, c.cfg.max_combine_units(), unit);
  }
  MOE_A2A_DEVICE Signal* start_signal(int owner, int src) const {
    return rank_signal(owner, c.heap_layout.start_signal, src);
  }
  MOE_A2A_DEVICE Signal* wgrad_signal(int owner, int src, int g) const {
    return signals(owner, c.heap_layout.wgrad_signal, src, c.cfg.max_groups(), g);
  }
  MOE_A2A_DEVICE Signal* grad_signal(int owner, int src, int g, int k) const {
    return signals(owner, c.heap_layout.grad_signal, src, c.cfg.max_groups() * kGradSubRanges, g * kGradSubRanges + k);
  }
  MOE_A2A_DEVICE Signal* rank_signal(int owner, size_t region, int src) const {
    return reinterpret_cast<Signal*>(heap_region(owner, region)) + src;
  }

  // ---- local workspace ----
  template <typename T>
  MOE_A2A_DEVICE T* ws(size_t offset) const {
    return reinterpret_cast<T*>(c.workspace + offset);
  }
  MOE_A2A_DEVICE uint64_t* block_epoch() const { return ws<uint64_t>(c.ws_layout.block_epoch) + blockIdx.x; }
  MOE_A2A_DEVICE uint64_t* round_error() const { return ws<uint64_t>(c.ws_layout.round_error); }
  MOE_A2A_DEVICE uint64_t* timed_out() const { return ws<uint64_t>(c.ws_layout.timed_out); }
  MOE_A2A_DEVICE uint64_t* recv_ticket() const { return ws<uint64_t>(c.ws_layout.recv_ticket); }
  MOE_A2A_DEVICE uint32_t* pair_totals() const { return ws<uint32_t>(c.ws_layout.pair_totals); }
  MOE_A2A_DEVICE uint32_t* reserved_blocks() const { return ws<uint32_t>(c.ws_layout.reserved_blocks); }

  // This round's epoch: one more than the rounds this block has completed. Every block of
  // every EP kernel keeps its own count (all equal between rounds), so the end of a round needs
  // no grid-wide step: each block of the round's last kernel advances its own (end_round).
  MOE_A2A_DEVICE uint64_t current_epoch() const { return *block_epoch() + 1; }
  MOE_A2A_DEVICE int vecs_per_row() const { return static_cast<int>(c.cfg.row_bytes() / sizeof(Vec16)); }
};

// Records the first error of the call (later ones are dropped; a peer's report goes apart, into
// peer_report: ErrorRecord) and marks this round as failed so the signals this rank publishes from
// now on carry kFlagErrorBit. A timeout also marks the engine timed out: every wait still to come
// in a kernel already queued then gives up at once (a rank does not wait out one timeout per
// queued kernel), and the host refuses later calls. The record comes before the mark (the code's
// swap is acquire-release): a signal with the error bit, and a peer's answer to it (kPeerError here),
// come after this rank's own error, which the host, reading peer_report first, then finds
// (protocol.md, "Errors travel in signals"). A second own error, which loses the claim, marks at
// once; the host waits for the first one's code (EpEngine::own_error_once_written).
MOE_A2A_DEVICE inline void report_error(const EpContext& c, ErrorCode code, int peer, int detail, int64_t index,
                                        uint64_t expected, uint64_t seen) {
  ErrorRecord* e = c.error;
  if (code == ErrorCode::kPeerError) {
    atomic_cas_sys(&e->peer_report, 0u, static_cast<uint32_t>(peer) + 1u);
  } else if (atomic_cas_sys(&e->claimed, 0u, 1u) == 0u) {
    e->peer = peer;
    e->detail = detail;
    e->index = index;
    e->expected = expected;
    e->seen = seen;
    atomic_cas_sys(&e->code, 0u, static_cast<uint32_t>(code));  // acq_rel: after the fields, before the mark
  }
  EpBuffers b{c};
  st_relaxed_sys(b.round_error(), b.current_epoch());
  if (code == ErrorCode::kTimeout) st_relaxed_sys(b.timed_out(), uint64_t{1});
}

// The error bit of every signal this rank publishes in round `epoch`.
MOE_A2A_DEVICE inline uint32_t round_error_bit(const EpBuffers& b, uint64_t epoch) {
  return ld_relaxed_sys(b.round_error()) == epoch ? kFlagErrorBit : 0u;
}

// Publishes `s` for round `epoch` with one release store of epoch and payload, so a reader
// that acquired it sees everything this thread (and, after a block barrier, its block) wrote
// before.
MOE_A2A_DEVICE inline void publish(Signal* s, uint64_t epoch, uint32_t payload) {
  st_release_sys(&s->word, signal_word(epoch, payload));
}
// The same with a relaxed store, for a signal that publishes no data (what it announces travels
// in flagged words, or is a read already done): no fence waits for this thread's stores first.
MOE_A2A_DEVICE inline void publish_relaxed(Signal* s, uint64_t epoch, uint32_t payload) {
  st_relaxed_sys(&s->word, signal_word(epoch, payload));
}

// A payload from peer `peer` of this round (a signal's, or a flagged word's): an error bit in it
// is reported as kPeerError from `peer`.
MOE_A2A_DEVICE inline void accept_payload(const EpContext& c, uint32_t payload, int peer) {
  // This rank's own error is reported where it was found, with its details.
  if ((payload & kFlagErrorBit) && peer != c.cfg.rank) report_error(c, ErrorCode::kPeerError, peer, -1, -1, 0, 0);
}

// A signal word `seen` of peer `peer` that has reached the round's epoch, acquired: its payload
// into *payload (accept_payload).
MOE_A2A_DEVICE inline void accept_signal(const EpContext& c, uint64_t seen, int peer, uint32_t* payload) {
  *payload = signal_payload(seen);
  accept_payload(c, *payload, peer);
}

// One thread waits for `s` to reach `epoch` (bounded). On success returns true with the
// payload; an error bit in it is reported as kPeerError from `peer`. On timeout, or once another
// wait of this engine timed out, reports a timeout at `site` (group `group`, -1 for a per-rank
// signal; the first error of the call is the one the host raises) and returns false.
MOE_A2A_DEVICE inline bool await_signal(const EpContext& c, const Signal* s, uint64_t epoch, int peer, WaitSite site,
                                        int group, uint32_t* payload) {
  uint64_t seen = 0;
  if (!wait_until_at_least_sys(&s->word, signal_word(epoch, 0), c.timeout_ticks, &seen, EpBuffers{c}.timed_out())) {
    report_error(c, ErrorCode::kTimeout, peer, static_cast<int>(site), group, signal_epoch(signal_word(epoch, 0)),
                 signal_epoch(seen));
    *payload = 0;
    return false;
  }
  accept_signal(c, seen, peer, payload);
  return true;
}

// Block-wide: waits until signal(r) has reached `epoch` for every rank r in `ranks` (thread r
// waits for rank r). payload[r] gets its payload (0 for ranks not waited for). Returns false
// if any wait timed out; a block that gets false must leave without touching any buffer (the
// engine is failed from then on). Must be called by all threads.
template <typename SignalOf>
MOE_A2A_DEVICE inline bool await_ranks(const EpContext& c, SignalOf signal, uint32_t ranks, uint64_t epoch,
                                       WaitSite site, int group, uint32_t* payload) {
  __shared__ bool ok;
  if (threadIdx.x == 0) ok = true;
  __syncthreads();
  if (threadIdx.x < c.cfg.world) {
    const int r = threadIdx.x;
    uint32_t p = 0;
    if ((ranks >> r) & 1u) {
      if (!await_signal(c, signal(r), epoch, r, site, group, &p)) ok = false;
      MOE_A2A_PROFILE(profiler_arrivals()[r] = wall_clock());
    } else {
      MOE_A2A_PROFILE(profiler_arrivals()[r] = 0);
    }
    payload[r] = p;
  }
  __syncthreads();
  return ok;
}

// Block-wide: waits until signal(i) has reached `epoch` for at least one item i of `items` (a bit
// each, i < n_items <= 32, the mask's bits; item i comes from rank peer_of(i)), or, with `every`, for all of
// them, then returns every item of `items` whose signal had arrived by then (acquired, payload[i]
// set), or 0 after a timeout (reported for the lowest item still missing). Lets a block work on
// what arrived first, in one batch, instead of waiting in order. All threads must call it.
template <typename SignalOf, typename PeerOf>
MOE_A2A_DEVICE inline uint32_t await_some_signals(const EpContext& c, SignalOf signal, uint32_t items, int n_items,
                                                  PeerOf peer_of, uint64_t epoch, WaitSite site, int group,
                                                  uint32_t* payload, bool every = false) {
  __shared__ uint32_t arrived_items;
  if (wave_id() == 0) {
    const int i = lane_id();
    const bool mine = i < n_items && ((items >> i) & 1u);
    const LaneMask wanted = wave_ballot(mine);
    const uint64_t start = wall_clock();
    const uint64_t* timed_out = EpBuffers{c}.timed_out();
    bool ready = false;
    LaneMask arrived = 0;
    // The first look is an acquire load: a signal that is there already (a late waiter, the usual
    // case once the counts are in) costs one load, not a relaxed one and then an acquire one.
    uint64_t seen = mine ? ld_acquire_sys(&signal(i)->word) : 0;
    uint32_t spins = 1;
    const auto enough = [&] { return every ? arrived == wanted : arrived != 0; };
    for (;; ++spins) {
      ready = mine && reached(seen, signal_word(epoch, 0));
      arrived = wave_ballot(ready);
      if (enough() || wall_clock() - start > c.timeout_ticks) break;
      // Another wait of this engine timed out: give up now (see report_error).
      if (spins % kGiveUpEvery == 0 && wave_ballot(ld_relaxed_sys(timed_out) != 0)) break;
      if (mine) seen = ld_poll_sys(&signal(i)->word);
    }
    if (!enough()) {
      if (i == __ffs(static_cast<int>(wanted & ~arrived)) - 1) {  // timed out: the lowest missing item
        report_error(c, ErrorCode::kTimeout, peer_of(i), static_cast<int>(site), group,
                     signal_epoch(signal_word(epoch, 0)), signal_epoch(ld_relaxed_sys(&signal(i)->word)));
      }
      ready = false;
      arrived = 0;
    }
    if (ready) {
      if (spins > 1 && !kPollAcquires) seen = ld_acquire_sys(&signal(i)->word);  // seen relaxed: one acquire load
      accept_signal(c, seen, peer_of(i), payload + i);
    }
    if (i == 0) arrived_items = static_cast<uint32_t>(arrived);
  }
  __syncthreads();
  const uint32_t result = arrived_items;
  __syncthreads();  // arrived_items is rewritten by the next call
  return result;
}

// await_some_signals over ranks: item r is rank r's signal.
template <typename SignalOf>
MOE_A2A_DEVICE inline uint32_t await_some_ranks(const EpContext& c, SignalOf signal, uint32_t ranks, uint64_t epoch,
                                                WaitSite site, int group, uint32_t* payload, bool every = false) {
  return await_some_signals(c, signal, ranks, c.cfg.world, [](int r) { return r; }, epoch, site, group, payload, every);
}

// Rows of several sources' token groups handled as one batch: batch row j belongs to the
// source of the first entry whose `first` exceeds it. Filled by wave 0 (gather_batch), read by
// all.
struct SourceRows {
  int count;  // sources in the batch
  int src[kMaxWorld];
  int begin[kMaxWorld];      // first slot of the source's group
  int end[kMaxWorld];        // one past its last slot
  int first[kMaxWorld + 1];  // first batch row of each source; first[count] = rows in all
  // Batch row j -> (source index in the batch, slot).
  MOE_A2A_DEVICE void locate(int j, int& i, int& slot) const {
    i = 0;
    while (i + 1 < count && j >= first[i + 1]) ++i;
    slot = begin[i] + (j - first[i]);
  }
};

// Wave 0 fills `in` from one lane per source: lane s < world says whether source s takes part,
// its group's slots and how many of them hold rows. Sources go in order from `first_source` on,
// wrapping (first_source, ..., world - 1, 0, ..., first_source - 1): ascending by default; combine
// starts each unit's batch at another rank (gather_unit_batch). One lane per source, not one thread
// looping over them: a source's group bounds take integer divisions (a long routine on GPUs), and
// at world 8 a loop would do eight in a row. Returns the source's index in the batch (valid where
// it takes part); the caller synchronises the block before anyone reads `in`.
MOE_A2A_DEVICE MOE_A2A_INLINE int gather_batch(SourceRows& in, int world, bool takes_part, TokenRange slots, int rows,
                                               int first_source = 0) {
  const bool mine = lane_id() < world && takes_part;
  const LaneMask bits = wave_ballot(mine);
  const auto place = [&](int s) { return s >= first_source ? s - first_source : s + world - first_source; };
  const int my_place = place(lane_id());
  const int my_rows = mine ? rows : 0;
  int at = 0, upto = 0;  // sources of the batch before this lane's; their rows and this lane's
#pragma unroll
  for (int s = 0; s < kMaxWorld; ++s) {
    const int r = wave_shfl(my_rows, s);
    if (((bits >> s) & 1u) && place(s) <= my_place) {
      upto += r;
      if (place(s) < my_place) ++at;
    }
  }
  if (mine) {
    in.src[at] = lane_id();
    in.begin[at] = slots.begin;
    in.end[at] = slots.end;
    in.first[at + 1] = upto;
  }
  if (lane_id() == 0) {
    in.count = popcount(bits);
    in.first[0] = 0;
  }
  return at;
}

// The largest f(s) over the sources s < world, in every lane of the calling wave: one lane per
// source (f may divide; see gather_batch), no block barrier.
template <typename F>
MOE_A2A_DEVICE MOE_A2A_INLINE int max_over_sources(int world, F f) {
  int v = lane_id() < world ? f(lane_id()) : 0;
#pragma unroll
  for (int d = 1; d < kMaxWorld; d *= 2) v = max(v, wave_shfl_xor(v, d));
  return wave_shfl(v, 0);
}

// The sources (a bit each) that have a token group g, from each source's token count.
MOE_A2A_DEVICE MOE_A2A_INLINE uint32_t sources_with_group(const EpConfig& cfg, const int* src_tokens, int g) {
  uint32_t with = 0;
#pragma unroll 1  // a few ranks: a loop, not eight copies (protocol.md, "Code size")
  for (int s = 0; s < cfg.world; ++s) {
    if (g < cfg.num_groups(src_tokens[s])) with |= 1u << s;
  }
  return with;
}

// Every block of a round's last kernel calls this once at its end (all threads): this block's
// round is over, so its epoch advances. Needs no other block.
MOE_A2A_DEVICE inline void end_round(const EpBuffers& b) {
  __syncthreads();  // every thread of the block has read the epoch
  if (threadIdx.x == 0) *b.block_epoch() = *b.block_epoch() + 1;
}

// A dispatch's per-source token counts (RecvRoute::src_tokens) into shared memory, and, if
// `first_row` is given, their prefix sums (slots of all sources numbered 0..N-1). The route
// came back from the caller: one that no dispatch could have written (a count outside
// [0, max_tokens]) is reported and read as "no tokens", so it never addresses outside a buffer.
MOE_A2A_DEVICE inline void load_route_tokens(const EpContext& c, const RecvRoute& route, int* src_tokens,
                                             int* first_row = nullptr) {
  __shared__ bool bad;
  const int world = c.cfg.world;
  if (threadIdx.x < world) src_tokens[threadIdx.x] = route.src_tokens[threadIdx.x];  // in parallel
  __syncthreads();
  if (threadIdx.x == 0) {
    bad = false;
    int sum = 0;
    for (int r = 0; r < world; ++r) bad = bad || src_tokens[r] < 0 || src_tokens[r] > c.cfg.max_tokens;
    for (int r = 0; r < world; ++r) {
      if (bad) src_tokens[r] = 0;
      if (first_row != nullptr) first_row[r] = sum;
      sum += src_tokens[r];
    }
    if (first_row != nullptr) first_row[world] = sum;
    if (bad && blockIdx.x == 0) report_error(c, ErrorCode::kBadRoute, -1, -1, -1, 0, 0);
  }
  __syncthreads();
}

// Slot g of all sources numbered together -> (source rank, slot in that source's region).
MOE_A2A_DEVICE MOE_A2A_INLINE void row_source(const int* first_row, int world, int g, int& src, int& slot) {
  src = 0;
  while (src + 1 < world && g >= first_row[src + 1]) ++src;
  slot = g - first_row[src];
}

// Ranks whose bit is set among the lowest `world`.
MOE_A2A_DEVICE MOE_A2A_INLINE uint32_t all_ranks(int world) { return (1u << world) - 1u; }
// Every rank but this one, a bit each.
MOE_A2A_DEVICE MOE_A2A_INLINE uint32_t peer_ranks(const EpConfig& cfg) {
  return all_ranks(cfg.world) & ~(1u << cfg.rank);
}

}  // namespace moe_a2a
