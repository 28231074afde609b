// One description of an expert-parallel all-to-all, and the only place that computes buffer
// sizes and offsets. The allocator (host) and the kernels (device) both call these helpers,
// so they cannot disagree. Every size is size_t: 8 ranks x 4096 tokens x 16384 hidden x 2
// bytes overflows int32. The protocol that uses these regions is docs/design/protocol.md.
//
// Transport (symmetric heap, same layout on every rank; "src" is the rank that wrote):
//   recv_x      [world src][max_tokens][hidden]   dispatched rows. Source token group g
//                                                 (see token_group) owns slots
//                                                 [group begin, group end); its rows for this
//                                                 rank fill the first ones. The backward of
//                                                 combine reuses it, indexed by source token.
//                                                 A slot is row_bytes() long; a dispatch uses
//                                                 its first wire_row_bytes(): the row as is,
//                                                 or with fp8 rows the hidden fp8 bytes, then
//                                                 scale_blocks() fp32 scales (16-byte padded).
//                                                 recv_x[me] and comb_x[me] (a rank's own rows)
//                                                 stay unused where they move without the heap
//                                                 (kOwnRowsDirectTokens).
//   recv_token  [world src][max_tokens]           source token of each slot's row
//   recv_expert [world src][max_tokens][topk]     where each k goes (place_word): -1 if k's
//                                                 expert lives on another rank, else the local
//                                                 expert and the pair's rank among the (token,
//                                                 k) pairs src sends to it in this round
//   recv_weight [world src][max_tokens][topk]     router weight of each k
//   recv_count  [world src][experts_per_rank + 1]  flagged words (csrc/ep/flagged_rows.cuh),
//                                                 each 32 data bits with the round's flag,
//                                                 rewritten every dispatch, never cleared:
//                                                 the (token, k) pairs src sends to each local
//                                                 expert in this round (the segments, and
//                                                 where each source's pairs start in them),
//                                                 then src's token count and error bit (a
//                                                 signal's payload, kFlagCountMask and
//                                                 kFlagErrorBit)
//   comb_x      [world src][max_tokens][hidden]   partial sums sent back by expert rank `src`,
//                                                 indexed by this rank's token
//   comb_w      [max_tokens][topk]                backward of combine (or, with the weights at
//                                                 the experts, of dispatch): gradient of this
//                                                 rank's router weight (t, k), written by the rank
//                                                 that owns expert topk_idx[t][k], as a flagged
//                                                 word (fp32 bits and the round's flag; 0 once
//                                                 read)
//   comb_flagged [world src][flagged_tokens][flagged_row_bytes]  combine at a few tokens
//                                                 (flagged_partials): comb_x's partial sums as
//                                                 flagged words, each 4 bytes with the round's
//                                                 flag (csrc/ep/flagged_rows.cuh); 0 once read
//   signals (Signal, below), one per writer and what it announces:
//     group_signal  [world src][max_groups]     rows of src's token group g are in place;
//                                               payload: how many
//     partial_signal[world src][max_combine_units]  src's partial sums for this rank's combine
//                                               unit u (a token group, or at small T a part
//                                               of one: see combine_parts) are in comb_x
//     start_signal  [world src]                 src's combine of this round has started: every
//                                               read of the round's earlier kernels on src is
//                                               done; payload: error bit (the backward of
//                                               dispatch: src may write comb_x; a token rank
//                                               with flagged partial sums: instead of
//                                               partial_signal)
//     wgrad_signal  [world src][max_groups]     backward of combine: src answered this rank's
//                                               token group g (its weight gradients, if
//                                               asked, are on their way to comb_w, flagged;
//                                               the signal is relaxed); a rank with no tokens
//                                               gets group 0's, so every round ends on a
//                                               signal from every rank
//     grad_signal   [world src][max_groups][kGradSubRanges]  backward of combine: sub-range
//                                               k of src's token group g has its output
//                                               gradients in recv_x (grad_subranges of them;
//                                               one, k = 0, the whole group); payload: 1 if
//                                               src asks for weight gradients
// Workspace (local memory, only this GPU touches it):
//   block_epoch[num_blocks]   rounds completed, one counter per block of the EP grid (every
//                             kernel runs num_blocks blocks, and block b reads and advances
//                             only its own counter, so no block waits for another to say a
//                             round is over)
//   round_error              epoch of the last round in which this rank hit an error; the
//                             signals it publishes in that round carry kFlagErrorBit
//   timed_out                non-zero once a wait of this engine timed out (never cleared:
//                             the engine is unusable from then on); every later wait of a
//                             kernel already queued gives up at once instead of waiting out
//                             its own timeout
//   recv_ticket              dispatch's receive items shared by whichever block is free first
//                             when blocks are set aside for sending: signal_word(epoch, items
//                             drawn) of the last round that drew one
//                             (csrc/ep/dispatch_receive.cuh, draw_item)
//   pair_totals[num_experts]  dispatch into fp8 whose blocks all wait for the counts: this round's
//                             (token, k) pairs per global expert, summed by the sending blocks as
//                             each reserves the ranks of its own pairs; 0 between rounds
//   reserved_blocks          the sending blocks that have reserved theirs this round; 0 between
//                             rounds
//                             (csrc/ep/dispatch_send.cuh, reserve_pairs)
// What one round needs later (which rows went where) is not kept here but in tensors the
// caller holds (see kernels.h), so that a backward pass can replay a round long after later
// rounds reused these buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "moe_a2a/ep/fp8.h"
#include "moe_a2a/heap.h"
#include "moe_a2a/platform/backend.h"

namespace moe_a2a {

inline constexpr int kMaxTopk = 16;
// A topk_idx entry of -1 marks an unused slot: no row is sent for it, its weight is ignored, and
// combine skips it (other negative ids are bad input).
inline constexpr int kMaskedSlot = -1;
inline constexpr int kMaxExperts = 512;
inline constexpr int kMaxHidden = 16384;
inline constexpr int kMaxTokensPerRank = 4096;
inline constexpr size_t kBufferAlign = 256;
// Threads per block of every EP kernel. A token group never has more tokens than this (one
// thread routes one token).
inline constexpr int kBlockThreads = 256;
// Token groups per block and round, by default: more groups pipeline sending and receiving
// better inside a block, fewer cost fewer signals.
inline constexpr int kDefaultGroupsPerBlock = 1;
inline constexpr int kMaxGroupsPerBlock = 64;
// A rank whose tokens would fill one group a block (x groups_per_block) with more than this many
// tokens each splits them into twice as many groups (num_groups): each block then sends a second
// group while the first one's rows land, and a combine block answers one unit while it reduces the
// other. 2 x H100 (132 blocks: above 2112 tokens), DeepSeek-V3, one engine built for 4096 tokens,
// against one group a block in the same call (session 31, call 4; doubled above 2048 tokens there):
// graph d+c 452.5 -> 403.5 us at 4096/512 tokens, 351.5 -> 333.5 at 1024/3072, 354.6 -> 344.4 drawn
// (fp8 e4m3fn 416.1 -> 358.0, 318.0 -> 297.0, 317.4 -> 305.0); every rank at one count unchanged in
// bf16, 2-3% slower in fp8. Two groups a block at every count (call 3) lost 6-14 us at 1536 tokens
// (groups of 6) and 10-20 at 1024 (4): hence only groups this large, whatever the blocks (an MI300X's
// 304 blocks hold at most 13.5 tokens a group at 4096 tokens, and keep one group a block).
inline constexpr int kDoubleGroupsTokens = 16;
inline constexpr int kMaxBlocks = 1024;
inline constexpr int kMaxExpertAlignment = 1024;
// EpConfig::dispatch_senders / combine_senders: pick the sending blocks per launch.
inline constexpr int kAutoSenders = -1;
// From this many tokens on, an automatic dispatch sets half its blocks aside for sending
// (EpConfig::dispatch_sender_blocks): on two H100s at DeepSeek-V3, 1024 and 4096 tokens, the link
// and the expansion into expert_x then overlap; below, every block sending and receiving was faster.
inline constexpr int kSplitDispatchTokens = 1024;
// From this many tokens a rank's fused dispatch and combine move its own rows without the heap:
// dispatch's receive half reads them from x, not from recv_x[me], and combine's token side sums
// them from expert_y, not through comb_x[me] (docs/design/protocol.md, "Own rows"). That saves
// a write and a read of every own row where the expansion's HBM traffic bounds the round. At a few
// tokens dispatch's was slower (the own rows' signal came before the peers', and a block placed
// them in a batch of their own); combine's, not timed there, keeps the same threshold.
inline constexpr int kOwnRowsDirectTokens = 1024;
// From this many tokens a fused dispatch that copies rows as they are (not fp8), with every block
// on both halves, places this rank's own rows in expert_x as it sends them (own_placed, as a
// quantizing dispatch does from kOwnRowsDirectTokens): its blocks wait for the counts before
// sending, and the own rows' writes run beside the link's instead of after it. 2 x H100,
// DeepSeek-V3, graph d+c (session 17): 5% faster from 512 to 768 tokens every rank, 1-1.7 us
// slower where only this rank is past 512 and its peer well below; from 256, 2.7 us slower at
// 256 tokens (E128-K8-H4096), from 128, up to 5.8 with counts drawn (docs/design/protocol.md,
// "Own rows").
inline constexpr int kOwnPlacedCopyTokens = 512;
// The largest world at which kOwnPlacedCopyTokens applies. At world 4 (4 x H100, session 19) it
// lost: graph d+c 0-2% slower at 512-768 tokens every rank and 600/300, 5% with counts drawn in
// 1..1024. At world 8 (reasoned, protocol.md "Own rows") the own rows are an eighth of those a rank
// receives, so less overlaps still, while the wait for the counts before the first send grows to
// the slowest of 8 counting blocks.
inline constexpr int kOwnPlacedCopyWorld = 2;
// A rank with at most this many tokens gets its combine partial sums as flagged words
// (EpConfig::flagged_partials; docs/design/protocol.md, "Flagged partial sums"): twice the bytes,
// summed as they land instead of after a fence and a signal. On 2 x H100 (session 15) 32 took
// 2.4-2.7 us off graph d+c at the challenge shapes of 16 and 32 tokens drawn per rank, against the
// one-GPU proxy's 4; 64 lost at 128 tokens drawn, where the doubled bytes cross a busy link. At
// world 4 (4 x H100, session 19) 16 lost to 32 at every small shape (0.1-2.3 us), so one threshold
// serves every world.
inline constexpr int kFlaggedTokens = 32;
// The backward of combine sends a token group's output gradients to a peer in this many
// sub-ranges of its tokens, each with its own signal (EpConfig::grad_subranges), where the peer
// would otherwise idle until the whole group landed; each sub-range holds at least
// kGradSubRangeTokens tokens. 2 x H100, DeepSeek-V3, 2048 tokens at 0/2048: 209.8 -> 161.5 us
// (4 x H100, 0/2048/0/2048: 332.9 -> 300.5). docs/design/protocol.md, "Sub-ranges".
inline constexpr int kGradSubRanges = 4;
inline constexpr int kGradSubRangeTokens = 2;
// A flagged row is laid out in blocks of 64 vectors (the widest wave, csrc/ep/flagged_rows.cuh).
inline constexpr size_t kFlaggedRowAlign = 64 * 16;

// How dispatch lays out the rows it delivers (the rows of expert_x, seen as [rows, hidden]):
//   kPadded: expert e owns rows [e * capacity, (e + 1) * capacity), the first
//            expert_num_tokens[e] of them filled; capacity is per expert.
//   kPacked: experts' rows follow each other with no gaps, expert e from offsets[e]; capacity
//            is the total over all local experts. Ready for grouped GEMMs with offsets.
enum class Layout : int32_t { kPadded = 0, kPacked = 1 };

// A signal: a writer announces that what it wrote before is in place, for round `epoch`,
// with a payload (a 23-bit count and an error bit). It is one 64-bit word, written with one
// release store: a payload stored separately before the epoch would put one more acknowledged
// store over the link between the writer's fence and its announcement. The word is
// signal_word(epoch, payload) = epoch << 24 | payload, so it holds the epoch's low 40 bits; the
// reader waits until reached(word, signal_word(epoch, 0)). Why that is right across every wrap,
// and why "at least" reads the round it wanted: docs/design/protocol.md, "Epochs compare as serial
// numbers" and "Why nothing is overwritten too early".
struct Signal {
  uint64_t word;
};
static_assert(sizeof(Signal) == 8, "a Signal is one word on every backend");

inline constexpr int kSignalPayloadBits = 24;
// Payload bit 23 says the writer hit an error in this round (bad input, capacity overflow),
// so the reader reports it too and every rank raises, instead of one rank raising and the
// rest waiting. The low 23 bits carry a count.
inline constexpr uint32_t kFlagErrorBit = 1u << (kSignalPayloadBits - 1);
inline constexpr uint32_t kFlagCountMask = kFlagErrorBit - 1u;
static_assert(kMaxTokensPerRank <= static_cast<int>(kFlagCountMask), "a token count fits a signal's payload");

MOE_A2A_HD inline constexpr uint64_t signal_word(uint64_t epoch, uint32_t payload) {
  return (epoch << kSignalPayloadBits) | (payload & ((1u << kSignalPayloadBits) - 1u));
}
MOE_A2A_HD inline constexpr uint32_t signal_payload(uint64_t word) {
  return static_cast<uint32_t>(word) & ((1u << kSignalPayloadBits) - 1u);
}
// The epoch bits of a word (the low 40 bits of the writer's epoch), for error messages.
MOE_A2A_HD inline constexpr uint64_t signal_epoch(uint64_t word) { return word >> kSignalPayloadBits; }

MOE_A2A_HD inline constexpr size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

// Hands out consecutive regions, each starting at a multiple of kBufferAlign.
struct RegionCursor {
  size_t end = 0;
  MOE_A2A_HD size_t take(size_t bytes) {
    const size_t at = end;
    end = align_up(end + bytes, kBufferAlign);
    return at;
  }
};

struct HeapLayout {
  size_t recv_x, recv_token, recv_expert, recv_weight, recv_count, comb_x, comb_w, comb_flagged;
  size_t group_signal, partial_signal, start_signal, wgrad_signal, grad_signal;
  size_t total;
};

struct WorkspaceLayout {
  size_t block_epoch, round_error, timed_out, recv_ticket, pair_totals, reserved_blocks;
  size_t total;
};

// Tokens [begin, end) of one token group.
struct TokenRange {
  int32_t begin, end;
};

// Part of a token group: its group, and the chunks [chunk_first, chunk_first + chunk_count) of
// each of the group's rows it covers. A group split into `parts` parts is work items
// group * parts + p, p < parts (combine units: EpConfig::combine_parts; dispatch's receive half:
// parts_per_group over its receiving blocks).
struct GroupPart {
  int32_t group, chunk_first, chunk_count;
};
// Item u of groups split into `parts` parts of rows of `chunks` chunks.
MOE_A2A_HD inline GroupPart group_part(int32_t u, int32_t parts, int32_t chunks) {
  if (parts == 1) return GroupPart{u, 0, chunks};  // without a division where it can
  const int32_t p = u % parts;
  const int32_t first = p * chunks / parts;
  return GroupPart{u / parts, first, (p + 1) * chunks / parts - first};
}
// Parts per group when `blocks` blocks share `groups` groups of rows of `chunks` chunks: as many
// as give each part a block of its own, at most one per chunk; 1 (without a division) when
// fewer than two blocks a group.
MOE_A2A_HD inline int32_t parts_per_group(int32_t groups, int32_t blocks, int32_t chunks) {
  if (groups == 0 || 2 * groups > blocks) return 1;
  const int32_t p = blocks / groups;
  return p > chunks ? chunks : p;
}

// What recv_expert holds for (row, k): kNoLocalExpert where k's expert lives on another rank,
// else place_word(local expert, rank), the rank being the pair's number among the (token, k)
// pairs its source sends to that expert this round (unique, in no particular order). The
// receiver places the pair at that expert's segment start + the pairs of lower sources (from
// the counts) + the rank: no counter shared between the receiving blocks, so every block that
// copies a part of the row computes the same position.
inline constexpr int32_t kNoLocalExpert = -1;
inline constexpr int kPlaceExpertBits = 8;
static_assert(kMaxExperts / 2 <= (1 << kPlaceExpertBits), "a local expert id fits its bits (world >= 2)");
static_assert(static_cast<int64_t>(kMaxTokensPerRank) * kMaxTopk <= (int64_t{1} << (31 - kPlaceExpertBits)),
              "a pair's rank fits its bits");
MOE_A2A_HD inline constexpr int32_t place_word(int32_t local_expert, int32_t rank) {
  return (rank << kPlaceExpertBits) | local_expert;
}
MOE_A2A_HD inline constexpr int32_t place_expert(int32_t word) { return word & ((1 << kPlaceExpertBits) - 1); }
MOE_A2A_HD inline constexpr int32_t place_rank(int32_t word) { return word >> kPlaceExpertBits; }

struct EpConfig {
  int32_t world = 0;
  int32_t rank = 0;
  int32_t num_experts = 0;
  int32_t topk = 0;
  int32_t hidden = 0;
  int32_t max_tokens = 0;       // tokens per rank per call, upper bound
  int32_t expert_capacity = 0;  // padded: rows per local expert; packed: rows in all
  int32_t elem_bytes = 2;       // 2: bf16 / fp16, 4: fp32
  Layout layout = Layout::kPadded;
  int32_t num_blocks = 1;  // blocks of every EP kernel; the same on every rank
  int32_t groups_per_block = kDefaultGroupsPerBlock;
  // Packed: every expert's rows start at a multiple of this (its segment is padded up to one);
  // 1 = no padding. Padded layout: 1.
  int32_t expert_alignment = 1;
  // Dispatch delivers fp8 rows with one fp32 scale per block of kFp8BlockElems channels
  // (include/moe_a2a/ep/fp8.h), quantized by dispatch's send half from the token type, or sent
  // as given when the caller quantized. kNone: rows stay in the token type. Combine and the
  // backward rounds always move the token type.
  Fp8Format fp8 = Fp8Format::kNone;
  int32_t fp8_pow2_scales = 0;  // 1: every scale a power of two (UE8M0-style)
  // Blocks that only send in a fused dispatch / combine launch (the others only receive); 0:
  // every block sends and receives; kAutoSenders: chosen per launch from the batch
  // (dispatch_sender_blocks, combine_sender_blocks; docs/design/protocol.md, "Sending and
  // receiving blocks"). Local scheduling, not protocol: which block handles a token group or
  // combine unit is invisible to the peers.
  int32_t dispatch_senders = kAutoSenders;
  int32_t combine_senders = kAutoSenders;

  MOE_A2A_HD int32_t experts_per_rank() const { return num_experts / world; }
  MOE_A2A_HD int32_t owner_rank(int32_t expert) const { return expert / experts_per_rank(); }
  MOE_A2A_HD size_t row_bytes() const { return static_cast<size_t>(hidden) * elem_bytes; }
  MOE_A2A_HD size_t rows_per_rank() const { return static_cast<size_t>(world) * max_tokens; }
  MOE_A2A_HD bool packed() const { return layout == Layout::kPacked; }

  // ---- the rows dispatch delivers ----
  MOE_A2A_HD bool fp8_rows() const { return fp8 != Fp8Format::kNone; }
  // Scales per fp8 row: one per block of kFp8BlockElems channels, the last one maybe shorter.
  MOE_A2A_HD int32_t scale_blocks() const { return (hidden + kFp8BlockElems - 1) / kFp8BlockElems; }
  // Bytes of one row of expert_x: hidden fp8 bytes, or the token type's row.
  MOE_A2A_HD size_t out_row_bytes() const { return fp8_rows() ? static_cast<size_t>(hidden) : row_bytes(); }
  // Bytes a dispatched row takes in its recv_x slot: the row, then (fp8) its scales.
  MOE_A2A_HD size_t wire_row_bytes() const {
    return fp8_rows() ? static_cast<size_t>(hidden) + align_up(static_cast<size_t>(scale_blocks()) * sizeof(float), 16)
                      : row_bytes();
  }

  // ---- token groups: the unit of sending and of signalling ----
  // A rank's T tokens are split into num_groups(T) groups of nearly equal size; each group is
  // sent (and, in combine, answered) by one block, which announces it with one signal per
  // destination (which block: BlockShares in csrc/ep/block_turns.cuh; block g % num_blocks when
  // no blocks are set aside for sending). Every rank computes the same split from T alone.
  // One group a block and round (x groups_per_block), or fewer where T is smaller: T groups of one
  // token each. Twice as many (at most T) where these would hold more than kDoubleGroupsTokens.
  MOE_A2A_HD int32_t base_groups() const {
    const int64_t g = static_cast<int64_t>(num_blocks) * groups_per_block;
    return static_cast<int32_t>(g < max_tokens ? g : max_tokens);
  }
  MOE_A2A_HD int32_t num_groups(int32_t tokens) const {
    const int32_t base = base_groups();
    const int32_t n = base << (tokens > kDoubleGroupsTokens * base ? 1 : 0);
    return tokens < n ? tokens : n;
  }
  // num_groups grows with T: the most groups any call has (the signals' layout).
  MOE_A2A_HD int32_t max_groups() const { return num_groups(max_tokens); }
  // 32-bit arithmetic: a 64-bit division is a long software routine on GPUs, and the kernels
  // compute group bounds on their critical path (g * tokens <= kMaxTokensPerRank^2 fits).
  MOE_A2A_HD TokenRange token_group(int32_t tokens, int32_t g) const {
    static_assert(static_cast<int64_t>(kMaxTokensPerRank) * kMaxTokensPerRank <= INT32_MAX, "token_group overflows");
    if (tokens <= base_groups()) return TokenRange{g, g + 1};  // one token a group: no division
    const int32_t n = num_groups(tokens);
    return TokenRange{g * tokens / n, (g + 1) * tokens / n};
  }
  // The most tokens one group can hold. Tokens per group grow with T between doublings, so they
  // peak at max_tokens or at the last count before the doubling.
  MOE_A2A_HD int32_t max_group_tokens() const {
    const int32_t a = group_tokens_at(last_undoubled_tokens()), b = group_tokens_at(max_tokens);
    return a > b ? a : b;
  }
  // The largest group of a call with `tokens` tokens.
  MOE_A2A_HD int32_t group_tokens_at(int32_t tokens) const {
    const int32_t n = num_groups(tokens);
    return n > 0 ? (tokens + n - 1) / n : 0;
  }
  // The most tokens a call can have that num_groups does not double.
  MOE_A2A_HD int32_t last_undoubled_tokens() const {
    const int32_t most = kDoubleGroupsTokens * base_groups();
    return max_tokens < most ? max_tokens : most;
  }
  // The backward of combine: in how many sub-ranges a rank with `tokens` tokens sends each token
  // group's output gradients to a peer with `peer_tokens` (both sides know both counts from the
  // forward's route). More than one where the peer holds at most half as many tokens (its own
  // rows cannot fill the link's time, so it would wait for the whole group, and every group lands
  // at about the link's end) and every group has kGradSubRanges x kGradSubRangeTokens tokens.
  MOE_A2A_HD int32_t grad_subranges(int32_t tokens, int32_t peer_tokens) const {
    return groups_fit_subranges(tokens) && 2 * peer_tokens <= tokens ? kGradSubRanges : 1;
  }
  // Whether the groups of a call with `tokens` tokens hold kGradSubRanges x kGradSubRangeTokens
  // tokens each (to one token: the split is even).
  MOE_A2A_HD bool groups_fit_subranges(int32_t tokens) const {
    return tokens > 0 && tokens >= kGradSubRanges * kGradSubRangeTokens * num_groups(tokens);
  }
  // Whether any rank's groups can be large enough for sub-ranges (where tokens per group peak, as
  // in max_group_tokens): the backward of combine's launcher runs the kernel's instance with their
  // code only then, the same on every rank.
  MOE_A2A_HD bool grad_subranges_possible() const {
    return groups_fit_subranges(last_undoubled_tokens()) || groups_fit_subranges(max_tokens);
  }
  // Tokens of sub-range k of a group sent in kGradSubRanges: the same split on both sides (a
  // constant divisor: no division routine on the kernels' path).
  MOE_A2A_HD static TokenRange grad_subrange(TokenRange group, int32_t k) {
    const int32_t n = group.end - group.begin;
    return TokenRange{group.begin + k * n / kGradSubRanges, group.begin + (k + 1) * n / kGradSubRanges};
  }

  // ---- combine units: the unit of combine's work and of its partial signals ----
  // With fewer groups than blocks (small T) a group's rows are split by chunk (the kernels'
  // unit of row work, `chunks` per row) into parts(T) parts, so that one token's sums and
  // reduction run on several blocks at once instead of being one block's chain. Unit u is
  // part u % parts of group u / parts: chunks [p * chunks / parts, (p + 1) * chunks / parts)
  // of each of the group's rows (group_part above). Each unit is summed by one block of every
  // expert rank and reduced by one block of the token's rank (BlockShares), announced by one
  // partial signal per rank. Both sides compute the units of a source from its token count alone.
  MOE_A2A_HD int32_t combine_parts(int32_t tokens, int32_t chunks) const {
    return parts_per_group(num_groups(tokens), num_blocks, chunks);
  }
  MOE_A2A_HD int32_t combine_units(int32_t tokens, int32_t chunks) const {
    return num_groups(tokens) * combine_parts(tokens, chunks);
  }
  // ---- sending and receiving blocks of a fused launch ----
  // Automatic: split when each half has a block for every item it takes, counted where the launch
  // knows them (a split with fewer blocks than items would serialise items); otherwise every block
  // does both, except that dispatch splits in halves from kSplitDispatchTokens on, its receive
  // items shared by whichever block is free (draw_item in csrc/ep/dispatch_receive.cuh), where it copies
  // rows: where it `quantizes` them into fp8 the quantizing senders bound it (4096 tokens, 2 x H100:
  // 291 us in halves, 258 with every block both). Dispatch: this rank's groups + the counting block
  // (the receive items depend on the peers' counts). Combine: the most units any source has (the
  // send half answers every source) + this rank's own units. Not part of the protocol: every rank
  // decides for itself (docs/design/protocol.md, "Sending and receiving blocks").
  MOE_A2A_HD int32_t dispatch_sender_blocks(int32_t tokens, bool quantizes = false) const {
    if (dispatch_senders != kAutoSenders) return dispatch_senders;
    const int32_t s = num_groups(tokens) + 1;
    if (2 * s <= num_blocks) return s;
    return tokens >= kSplitDispatchTokens && !quantizes ? num_blocks / 2 : 0;
  }
  // `my_units`: this rank's combine units; `src_units`: the most units any source (this rank
  // included) has, i.e. the send half's items.
  MOE_A2A_HD int32_t combine_sender_blocks(int32_t my_units, int32_t src_units) const {
    if (combine_senders != kAutoSenders) return combine_senders;
    return src_units > 0 && src_units + my_units <= num_blocks ? src_units : 0;
  }

  // ---- flagged partial sums (csrc/ep/flagged_rows.cuh) ----
  // A rank with `tokens` tokens gets its partial sums in comb_flagged, not comb_x. Both sides
  // decide from the token rank's count alone.
  MOE_A2A_HD int32_t flagged_tokens() const { return max_tokens < kFlaggedTokens ? max_tokens : kFlaggedTokens; }
  MOE_A2A_HD bool flagged_partials(int32_t tokens) const { return tokens <= flagged_tokens(); }
  // Bytes of one flagged row: a 4-byte flag next to every 4 bytes of the row.
  MOE_A2A_HD size_t flagged_row_bytes() const { return 2 * align_up(row_bytes(), kFlaggedRowAlign); }
  // Bytes of comb_flagged: [world src][flagged_tokens][flagged_row_bytes].
  MOE_A2A_HD size_t flagged_region_bytes() const {
    return static_cast<size_t>(world) * flagged_tokens() * flagged_row_bytes();
  }

  // parts > 1 only when groups * parts <= num_blocks: units never exceed this.
  MOE_A2A_HD int32_t max_combine_units() const { return max_groups() > num_blocks ? max_groups() : num_blocks; }

  // The worst case: padded, every token of every rank picked one expert; packed, every token
  // of every rank picked min(topk, experts_per_rank) experts of this rank, and every expert's
  // segment ends expert_alignment - 1 rows short of the next multiple.
  MOE_A2A_HD size_t worst_case_capacity() const {
    if (!packed()) return rows_per_rank();
    const int32_t per_token = topk < experts_per_rank() ? topk : experts_per_rank();
    return rows_per_rank() * static_cast<size_t>(per_token) +
           static_cast<size_t>(experts_per_rank()) * static_cast<size_t>(expert_alignment - 1);
  }
  // The largest capacity a caller may ask for: as above, but a token may name one expert in
  // several of its top-k slots (each slot is a row), so topk rows per token.
  MOE_A2A_HD size_t max_capacity() const {
    const size_t rows = rows_per_rank() * static_cast<size_t>(topk);
    return packed() ? rows + static_cast<size_t>(experts_per_rank()) * static_cast<size_t>(expert_alignment - 1) : rows;
  }
  // A hash of every field but the rank: the same on every rank of one all-to-all, and (but for
  // a 2^-64 chance) different between configurations. `salt` mixes in what the config does not
  // hold (the bindings' token dtype). Host only: the bindings build engine ids from it.
  uint64_t fingerprint(uint64_t salt) const {
    static_assert(sizeof(Layout) == 4 && sizeof(Fp8Format) == 4, "fields hashed as 32-bit words");
    const int32_t fields[] = {world,
                              num_experts,
                              topk,
                              hidden,
                              max_tokens,
                              expert_capacity,
                              elem_bytes,
                              static_cast<int32_t>(layout),
                              num_blocks,
                              groups_per_block,
                              expert_alignment,
                              static_cast<int32_t>(fp8),
                              fp8_pow2_scales,
                              dispatch_senders,
                              combine_senders};
    // One entry per field but the rank: a field added to the struct must be added above.
    static_assert(sizeof(fields) + sizeof(rank) == sizeof(EpConfig), "a new EpConfig field: hash it in fingerprint()");
    uint64_t h = 0xcbf29ce484222325ull ^ salt;  // FNV-1a, 64-bit
    for (const int32_t f : fields) {
      for (int byte = 0; byte < 4; ++byte) {
        h ^= (static_cast<uint32_t>(f) >> (8 * byte)) & 0xffu;
        h *= 0x100000001b3ull;
      }
    }
    return h;
  }

  // Rows an expert with n rows takes in the packed layout, padding included.
  MOE_A2A_HD int32_t aligned_rows(int32_t n) const {
    return (n + expert_alignment - 1) / expert_alignment * expert_alignment;
  }
  // Rows of expert_x seen as [rows, hidden].
  MOE_A2A_HD size_t output_rows() const {
    return packed() ? static_cast<size_t>(expert_capacity)
                    : static_cast<size_t>(experts_per_rank()) * static_cast<size_t>(expert_capacity);
  }

  // recv_count: every source's flagged count words, one a local expert and its token count.
  MOE_A2A_HD size_t recv_count_bytes() const {
    return static_cast<size_t>(world) * (experts_per_rank() + 1) * sizeof(uint64_t);
  }

  MOE_A2A_HD HeapLayout heap_layout() const {
    HeapLayout l{};
    RegionCursor cursor;
    auto take = [&cursor](size_t bytes) { return cursor.take(bytes); };
    const size_t rows = rows_per_rank();
    const size_t signals = static_cast<size_t>(world) * sizeof(Signal);
    l.recv_x = take(rows * row_bytes());
    l.recv_token = take(rows * sizeof(int32_t));
    l.recv_expert = take(rows * topk * sizeof(int32_t));
    l.recv_weight = take(rows * topk * sizeof(float));
    l.recv_count = take(recv_count_bytes());
    l.comb_x = take(rows * row_bytes());
    l.comb_w = take(static_cast<size_t>(max_tokens) * topk * sizeof(uint64_t));
    l.comb_flagged = take(flagged_region_bytes());
    l.group_signal = take(signals * max_groups());
    l.partial_signal = take(signals * max_combine_units());
    l.start_signal = take(signals);
    l.wgrad_signal = take(signals * max_groups());
    l.grad_signal = take(signals * max_groups() * kGradSubRanges);
    l.total = cursor.end;
    return l;
  }
  MOE_A2A_HD WorkspaceLayout workspace_layout() const {
    WorkspaceLayout l{};
    RegionCursor cursor;
    auto take = [&cursor](size_t bytes) { return cursor.take(bytes); };
    l.block_epoch = take(static_cast<size_t>(num_blocks) * sizeof(uint64_t));
    l.round_error = take(sizeof(uint64_t));
    l.timed_out = take(sizeof(uint64_t));
    l.recv_ticket = take(sizeof(uint64_t));
    l.pair_totals = take(static_cast<size_t>(num_experts) * sizeof(uint32_t));
    l.reserved_blocks = take(sizeof(uint32_t));
    l.total = cursor.end;
    return l;
  }

  // Bytes of the output of one dispatch: expert_x, and with fp8 rows their scales.
  MOE_A2A_HD size_t expert_x_bytes() const {
    const size_t scales = fp8_rows() ? static_cast<size_t>(scale_blocks()) * sizeof(float) : 0;
    return output_rows() * (out_row_bytes() + scales);
  }
};

// Default per-expert capacity: the worst case when the padded output fits `budget_bytes`,
// else as many rows as fit (at least 1). Callers that know their routing pass their own.
inline int32_t default_expert_capacity(const EpConfig& c, size_t budget_bytes) {
  const size_t per_row = (c.packed() ? 1 : static_cast<size_t>(c.experts_per_rank())) * c.out_row_bytes();
  const size_t fit = per_row == 0 ? 0 : budget_bytes / per_row;
  const size_t worst = c.worst_case_capacity();
  const size_t cap = fit < worst ? fit : worst;
  return static_cast<int32_t>(cap < 1 ? 1 : cap);
}

// The EpConfig fields that validate's messages name. A message names one through a FieldName, so
// that each field's name is decided where its users meet it: C++ callers read EpConfig's field names
// (cxx_field_name), Python users the AllToAll argument that sets the field (csrc/bindings/module.cpp).
// X(enum name, EpConfig field). The capacity is two entries because the Python API names it by layout.
#define MOE_A2A_CONFIG_FIELDS(X)                                                           \
  X(kNumExperts, num_experts)                                                              \
  X(kTopk, topk)                                                                           \
  X(kHidden, hidden)                                                                       \
  X(kMaxTokens, max_tokens)                                                                \
  X(kPaddedCapacity, expert_capacity) /* the padded layout's: rows per local expert */     \
  X(kPackedCapacity, expert_capacity) /* the packed layout's: rows in all local experts */ \
  X(kLayout, layout)                                                                       \
  X(kExpertAlignment, expert_alignment)                                                    \
  X(kNumBlocks, num_blocks)                                                                \
  X(kDispatchSenders, dispatch_senders)                                                    \
  X(kCombineSenders, combine_senders)                                                      \
  X(kGroupsPerBlock, groups_per_block)

enum class ConfigField {
#define MOE_A2A_X(e, field) e,
  MOE_A2A_CONFIG_FIELDS(MOE_A2A_X) kCount
};
#undef MOE_A2A_X
using FieldName = const char* (*)(ConfigField);

inline const char* cxx_field_name(ConfigField f) {
  // Each entry names the member itself (sizeof), so renaming one without its entry does not compile.
  static constexpr const char* kNames[] = {
#define MOE_A2A_X(e, field) (static_cast<void>(sizeof(EpConfig::field)), #field),
      MOE_A2A_CONFIG_FIELDS(MOE_A2A_X)
#undef MOE_A2A_X
  };
  return kNames[static_cast<int>(f)];
}

// Empty string if the config is supported, else what is wrong (for the host to raise), naming the
// fields by `name`. The limits in the messages come from the constants the checks use.
inline std::string validate(const EpConfig& c, FieldName name = cxx_field_name) {
  auto bad = [](const std::string& what) { return what; };
  // " must be in [lo, hi], got v"
  const auto in = [](const std::string& lo, int hi, int v) {
    return " must be in [" + lo + ", " + std::to_string(hi) + "], got " + std::to_string(v);
  };
  const std::string experts = name(ConfigField::kNumExperts), topk = name(ConfigField::kTopk),
                    hidden = name(ConfigField::kHidden), tokens = name(ConfigField::kMaxTokens),
                    layout = name(ConfigField::kLayout), alignment = name(ConfigField::kExpertAlignment),
                    blocks = name(ConfigField::kNumBlocks);
  if (c.world < 2 || c.world > kMaxWorld) return bad("world size" + in("2", kMaxWorld, c.world));
  if (c.rank < 0 || c.rank >= c.world) return bad("rank " + std::to_string(c.rank) + " outside the world");
  if (c.num_experts < c.world || c.num_experts > kMaxExperts)
    return bad(experts + in("world", kMaxExperts, c.num_experts));
  if (c.num_experts % c.world != 0)
    return bad(experts + " (" + std::to_string(c.num_experts) + ") must be divisible by the world size (" +
               std::to_string(c.world) + ")");
  if (c.topk < 1 || c.topk > kMaxTopk || c.topk > c.num_experts)
    return bad(topk + " must be in [1, min(" + std::to_string(kMaxTopk) + ", " + experts + ")], got " +
               std::to_string(c.topk));
  if (c.hidden < 8 || c.hidden > kMaxHidden || c.hidden % 8 != 0)
    return bad(hidden + " must be a multiple of 8 in [8, " + std::to_string(kMaxHidden) + "], got " +
               std::to_string(c.hidden));
  if (c.max_tokens < 1 || c.max_tokens > kMaxTokensPerRank)
    return bad(tokens + in("1", kMaxTokensPerRank, c.max_tokens));
  if (c.layout != Layout::kPadded && c.layout != Layout::kPacked) return bad(layout + " must be padded or packed");
  // before the capacity: the worst case depends on it
  if (c.expert_alignment < 1 || c.expert_alignment > kMaxExpertAlignment)
    return bad(alignment + in("1", kMaxExpertAlignment, c.expert_alignment));
  if (!c.packed() && c.expert_alignment != 1)
    return bad(alignment + " is for " + layout + "=\"packed\" (padded segments start at multiples of the capacity)");
  if (c.expert_capacity < 1 || static_cast<size_t>(c.expert_capacity) > c.max_capacity())
    return bad(std::string(name(c.packed() ? ConfigField::kPackedCapacity : ConfigField::kPaddedCapacity)) +
               " must be in [1, world * " + tokens + " * " + topk + (c.packed() ? " (+ alignment padding)" : "") +
               "] = [1, " + std::to_string(c.max_capacity()) + "], got " + std::to_string(c.expert_capacity));
  if (c.elem_bytes != 2 && c.elem_bytes != 4) return bad("token types must be 2 bytes (bf16, fp16) or 4 (fp32)");
  if (c.fp8 != Fp8Format::kNone && c.fp8 != Fp8Format::kE4M3Fn && c.fp8 != Fp8Format::kE4M3Fnuz)
    return bad("fp8 format must be none, e4m3fn or e4m3fnuz");
  if (c.fp8_rows() && c.hidden % 16 != 0)
    return bad("fp8 dispatch needs " + hidden + " to be a multiple of 16 (16-byte fp8 rows), got " +
               std::to_string(c.hidden));
  if (!c.fp8_rows() && c.fp8_pow2_scales != 0) return bad("power-of-two scales are for fp8 dispatch");
  if (c.wire_row_bytes() > c.row_bytes()) return bad("an fp8 row and its scales must fit a token row");
  if (c.num_blocks < 1 || c.num_blocks > kMaxBlocks)
    return bad(blocks + " (blocks per kernel)" + in("1", kMaxBlocks, c.num_blocks));
  for (const ConfigField f : {ConfigField::kDispatchSenders, ConfigField::kCombineSenders}) {
    const int32_t senders = f == ConfigField::kDispatchSenders ? c.dispatch_senders : c.combine_senders;
    if (senders != kAutoSenders && (senders < 0 || senders >= c.num_blocks))
      return bad(std::string(name(f)) +
                 " (blocks that only send) must be \"auto\", 0 (every block sends and receives) or in [1, " + blocks +
                 "), " + blocks + " = " + std::to_string(c.num_blocks) + ", got " + std::to_string(senders));
  }
  if (c.groups_per_block < 1 || c.groups_per_block > kMaxGroupsPerBlock)
    return bad(name(ConfigField::kGroupsPerBlock) + in("1", kMaxGroupsPerBlock, c.groups_per_block));
  if (c.max_group_tokens() > kBlockThreads) {
    // Only doubled groups can be this large (one group a block holds at most kDoubleGroupsTokens): at
    // max_tokens, in twice num_blocks x groups_per_block groups.
    const int32_t per_block = kBlockThreads * 2 * c.groups_per_block;
    return bad(blocks + " = " + std::to_string(c.num_blocks) + " is too few for " + tokens + " = " +
               std::to_string(c.max_tokens) + ": a token group would hold more than " + std::to_string(kBlockThreads) +
               " tokens; use at least " + std::to_string((c.max_tokens + per_block - 1) / per_block) + " blocks");
  }
  return {};
}

}  // namespace moe_a2a
