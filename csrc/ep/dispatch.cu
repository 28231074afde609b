// Dispatch, one kernel with a send half and a receive half. What each half writes, publishes and
// waits for is docs/design/protocol.md (the table, "Dispatch", "Token groups"); which block runs
// which half and takes which items is block_shares (block_turns.cuh; protocol.md, "Sending and
// receiving blocks").
//
// Send half: the last sending block counts the (token, k) pairs per expert and publishes them
// first (send_counts: the receivers need every expert's total before placing rows), or, in a launch
// that quantizes and whose blocks all wait for the counts (own_placed), every sending block reserves
// the ranks of its own pairs and the last to do so publishes the totals (reserve_pairs); each
// sending block then sends its token groups (send_group). Receive half: the expert segments from every
// source's counts (receive_counts), then each (group, part) item (receive_part, place_rows).
#include <algorithm>

// The send half, then the receive half, as they were in one file (the order of definitions kept).
#include "dispatch_send.cuh"

#include "dispatch_receive.cuh"

namespace moe_a2a {
namespace {

// kOwnRows (own_rows_instance): the instance that may move this rank's own rows without the heap
// (own_direct, own_placed); the other leaves that code out (protocol.md, "Code size").
template <SendCodec kCodec, Fp8Format kFmt, bool kOwnRows>
__global__ void __launch_bounds__(kEpBlock) dispatch_kernel(EpContext c_passed, DispatchArgs a_passed, Role role) {
  MOE_A2A_READ_IN_PLACE(c, a);  // c and a, where the launch put them (AMD: no copy in scratch)
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
                          c.max_group_tokens * cfg.topk <= kOwnPlacedPairs;
  // A launch that sends and receives plain rows, and does not place them so (its halves split),
  // reads this rank's own rows from x instead of staging them in recv_x, from kOwnRowsDirectTokens
  // on (protocol.md, "Own rows").
  const bool own_direct = kOwnRows && role == Role::kBoth && plain_rows(kCodec, cfg) && !own_placed &&
                          a.route.num_tokens >= kOwnRowsDirectTokens;

  const int my_groups = send.runs ? cfg.num_groups(a.route.num_tokens) : 0;
  int numbered_to = 0;                             // see send_group
  if (kCodec != SendCodec::kCopy && own_placed) {  // own_placed: this block sends and receives
    // Every block waits for the counts before its first send: each sending block reserves the
    // ranks of its pairs at once, and the last to do so sends the counts (reserve_pairs). Where it
    // quantizes only: a split launch of plain rows, whose senders do not wait, was slower with it,
    // and plain rows placed by their senders (512-1023 tokens) are left to an A/B of the instance
    // that would carry both ways (protocol.md, "Dispatch").
    ProfilerSpan count_span(prof, ProfilerEvent::kDispatchCounts, a.route.num_tokens);
    reserve_pairs(b, a, sh, send, my_groups, epoch, prof);
    numbered_to = kAllNumbered;
  } else if (send.runs) {
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
  bool balanced = false;  // receives_first
#pragma unroll 1
  for (int step = 0; step < 2; ++step) {
    if ((step == 0) != own_placed) {
      for (; next < my_groups && (next == send.first || share.sends_first); next += send.stride)
        send_group<kCodec, kFmt>(b, a, sh, next, numbered_to, own_direct, own_placed, epoch, prof);
    } else if (recv.runs) {
      if (!receive_counts(b, a, sh, recv, epoch, prof)) return;  // timed out: engine failed
      // num_groups(T) grows with T: the most tokens give the most groups.
      const int most = max_over_sources(cfg.world, [&](int s) { return sh.src_tokens[s]; });
      const int src_groups = cfg.num_groups(most);
      parts = parts_per_group(src_groups, recv.blocks, chunks);
      src_items = src_groups * parts;
      whole = most <= cfg.base_groups();
      balanced = kOwnRows && balanced_sources(cfg.world, sh.src_tokens);
    }
  }
  // Turns: send this block's next group, receive its next item (a block that runs both halves
  // receives item u after sending group u + G, so that the link and its local copies overlap), or,
  // where every rank holds about the same tokens, the receive turn first (receives_first). A
  // split's blocks have sent everything by now; the receive items past each receiving block's
  // first are drawn (draw_item), where there are any.
  const bool draws = share.split && src_items > recv.blocks;
  const auto draw_or_end = [&] { return draws ? draw_item(b, sh, epoch, recv.blocks) : src_items; };
  int u = share.split && recv.first >= recv.blocks ? draw_or_end() : recv.first;
  Turns turns{!receives_first(share.split, balanced)};
  while (u < src_items || next < my_groups) {
    if (turns.next_sends(next < my_groups, u < src_items)) {
      send_group<kCodec, kFmt>(b, a, sh, next, numbered_to, own_direct, own_placed, epoch, prof);
      next += send.stride;
    } else {
      if (!receive_part(b, a, sh, group_part(u, parts, chunks), own_direct, own_placed, whole, epoch, prof)) return;
      u = share.split ? draw_or_end() : u + recv.stride;
    }
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
