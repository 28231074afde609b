// What each block of a dispatch, combine or backward launch takes, and in which order: its share
// of the send and receive halves (block_shares) and the turns between them (receives_first, Turns).
// docs/design/protocol.md, "Sending and receiving blocks" and "Turns".
#pragma once

#include "ep_device.cuh"

namespace moe_a2a {

// What one block of a dispatch or combine launch takes (docs/design/protocol.md, "Sending and
// receiving blocks"): of each half it runs, the work items (token groups, combine units) first,
// first + stride, ... By default every block runs both halves of a fused launch, block b taking
// items b, b + G, ... of each (G blocks), alternating between them. With `senders` = S > 0
// (EpConfig::dispatch_sender_blocks, combine_sender_blocks) the first S blocks send (items i,
// i + S, ...) and the other R = G - S receive items j, j + G, ...; sending block i takes the
// receive items past those, R + i, R + i + G, ..., only once it has sent all its items
// (sends_first: a wait between two sends could wait for a peer's sending block that waits the same
// way for one of this rank's unsent items: a deadlock, e.g. two ranks, 8 blocks, one sending block each).
// Dispatch uses only each receiving block's first item from this (j < R, recv.blocks) and draws the
// rest (`split`; draw_item in dispatch_receive.cuh). Launches of one half use every block for it. A block
// outside a half has runs = false (its caller counts no items of that half for it) and first >= 0,
// so the loops need no other test.
struct HalfShare {
  bool runs;  // this block takes part in the half
  int first, stride;
  int blocks;  // blocks whose first item is below `blocks`: the ones that split items into parts
};
struct BlockShares {
  HalfShare send, recv;
  bool sends_first;  // every send item before any receive item, not one of each in turn
  bool split;        // some blocks only send: a fused launch with senders > 0
};
MOE_A2A_DEVICE MOE_A2A_INLINE BlockShares block_shares(Role role, int senders) {
  const int b = static_cast<int>(blockIdx.x), blocks = static_cast<int>(gridDim.x);
  if (role != Role::kBoth || senders == 0)
    return {{sends(role), b, blocks, blocks}, {receives(role), b, blocks, blocks}, false, false};
  constexpr HalfShare kNone{false, 0, 1, 1};
  const int receivers = blocks - senders;
  const HalfShare recv{true, b < senders ? receivers + b : b - senders, blocks, receivers};
  return b < senders ? BlockShares{{true, b, senders, senders}, recv, true, true}
                     : BlockShares{kNone, recv, false, true};
}

// Whether every source's token count is at least 3/4 of the largest (receives_first), in every
// lane of the calling wave.
MOE_A2A_DEVICE MOE_A2A_INLINE bool balanced_sources(int world, const int* src_tokens) {
  const int most = max_over_sources(world, [&](int s) { return src_tokens[s]; });
  return max_over_sources(world, [&](int s) { return 3 * most - 4 * src_tokens[s]; }) <= 0;
}

// Whether this block takes its receive turn before its next send, where it has more than one item
// of a half (dispatch_kernel, combine_kernel, combine_backward_kernel): the odd blocks of a launch
// whose every block runs both halves (not `split`), where every rank holds about the same tokens
// (`balanced`, balanced_sources). Half the blocks then copy or sum while the others send; with the
// doubled token groups every block sent both of its groups before it received, so the link and the
// copies took turns. Where the counts differ, the alternation was slower, also on the ranks that
// receive more than they send. Only the instances for 1024 tokens on (kOwnRows) and the backward's
// sub-ranges instance ask: below, a block has more than one group only on few-block grids, and the
// small shapes run this code cold (protocol.md, "Turns"). "Odd" counts blocks in strides of
// kDieStride, so that on an MI300X every XCD holds blocks of both parities, not the odd XCDs alone.
MOE_A2A_DEVICE MOE_A2A_INLINE bool receives_first(bool split, bool balanced) {
  return !split && balanced && ((blockIdx.x / kDieStride) & 1) != 0;
}

// Whose turn it is in a block that has items of both halves (dispatch_kernel, combine_kernel,
// combine_backward_kernel): one item of each in turn, from the half `send_turn` names; where one half
// has none left, the other goes on alone. The one place of the state machine that every kernel's
// turns follow (protocol.md, "Turns").
struct Turns {
  bool send_turn;
  // Whether the block's next item is a send (else a receive), given which halves have one left (at
  // least one does); then it is the other half's turn.
  MOE_A2A_DEVICE MOE_A2A_INLINE bool next_sends(bool sends_left, bool receives_left) {
    const bool sends = send_turn ? sends_left : !receives_left;
    send_turn = !sends;
    return sends;
  }
};

}  // namespace moe_a2a
