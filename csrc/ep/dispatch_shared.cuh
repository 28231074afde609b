// What both halves of dispatch.cu use: the block's shared memory (DispatchShared), which rows a launch
// copies or quantizes and when it places its own (send_codec, own_placed_from), how the send half reads x
// (input_rows) and the ids (read_expert), where a pair goes on this rank (place_pair). Part of dispatch.cu, included by it only (like dispatch_send.cuh
// and dispatch_receive.cuh): one translation unit, so that the kernel's code is what it was in one file.
#pragma once

#include "block_turns.cuh"
#include "ep_device.cuh"
#include "moe_a2a/platform/block_ops.h"

namespace moe_a2a {
namespace {  // part of dispatch.cu, its only includer: internal linkage as there

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
  bool reserved_last;            // reserve_pairs: the block that arrived last
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

}  // namespace
}  // namespace moe_a2a
