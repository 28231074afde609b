// One description of an expert-parallel all-to-all, and the only place that computes buffer
// sizes and offsets. The allocator (host) and the kernels (device) both call these helpers,
// so they cannot disagree. Every size is size_t: 8 ranks x 4096 tokens x 16384 hidden x 2
// bytes overflows int32.
//
// Transport (symmetric heap, same layout on every rank; "src" is the rank that wrote):
//   recv_x      [world src][max_tokens][hidden]   tokens dispatched to this rank, one row per
//                                                 (source token, this rank), whatever the
//                                                 number of this rank's experts it chose. The
//                                                 backward of combine reuses it, indexed by
//                                                 source token instead of slot.
//   recv_token  [world src][max_tokens]           source token index of each row
//   recv_expert [world src][max_tokens][topk]     local expert of each k, or -1 if k's expert
//                                                 lives on another rank
//   recv_weight [world src][max_tokens][topk]     router weight of each k
//   recv_count  [world src][experts_per_rank]     (token, k) pairs src sent to each local expert
//                                                 in this call: the packed layout's offsets
//   comb_x      [world src][max_tokens][hidden]   partial sums sent back by expert rank `src`,
//                                                 indexed by this rank's token
//   comb_w      [max_tokens][topk]                backward of combine: gradient of this rank's
//                                                 router weight (t, k), written by the rank
//                                                 that owns expert topk_idx[t][k]
//   dispatch_flag[world src], combine_flag[world src]   (epoch << 32) | payload, see below
// Workspace (local memory, only this GPU touches it):
//   slot_counter[world]     rows reserved per destination in the current dispatch
//   done_counter[kNumKernels]  blocks finished, per kernel (last block publishes, resets)
//   epoch                   completed rounds
//   expert_count[experts_per_rank]  rows placed per local expert in the current dispatch
//   send_count[num_experts]  (token, k) pairs this rank sends to each global expert
//   round_error             nonzero once this rank hit an error in the current call; sent to
//                           peers in the flag payload so that every rank fails together
// What one round needs later (which rows went where) is not kept here but in tensors the
// caller holds (see kernels.h), so that a backward pass can replay a round long after later
// rounds reused these buffers.
//
// Flags carry the call's epoch in the high 32 bits, so they never need a reset: a value left
// by the previous call has a smaller epoch and cannot be mistaken for the current one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "moe_a2a/heap.h"
#include "moe_a2a/platform/backend.h"

namespace moe_a2a {

inline constexpr int kMaxTopk = 16;
inline constexpr int kMaxExperts = 512;
inline constexpr int kMaxHidden = 16384;
inline constexpr int kMaxTokensPerRank = 4096;
inline constexpr size_t kBufferAlign = 256;

// Index of each kernel's done counter in the workspace.
enum KernelSlot : int {
  kDispatchSend = 0,
  kDispatchRecv = 1,
  kCombineSend = 2,
  kCombineRecv = 3,
  kOutputGradSend = 4,    // backward of combine: output gradient to the experts
  kOutputGradRecv = 5,    //   ... its receiving side, which returns the weight gradients
  kWeightGradRecv = 6,    //   ... and the source waiting for those
  kNumKernels = 7
};

// How dispatch lays out the rows it delivers (the rows of expert_x, seen as [rows, hidden]):
//   kPadded: expert e owns rows [e * capacity, (e + 1) * capacity), the first
//            expert_num_tokens[e] of them filled; capacity is per expert.
//   kPacked: experts' rows follow each other with no gaps, expert e from offsets[e]; capacity
//            is the total over all local experts. Ready for grouped GEMMs with offsets.
enum class Layout : int32_t { kPadded = 0, kPacked = 1 };

// Flag payloads: a dispatch flag carries the row count in the low 31 bits; in both flags bit 31
// says the sender hit an error in this call (bad input, capacity overflow), so the receiver
// reports it too and every rank raises, instead of one rank raising and the rest waiting.
inline constexpr uint32_t kFlagErrorBit = 0x80000000u;
inline constexpr uint32_t kFlagCountMask = 0x7fffffffu;

MOE_A2A_HD inline constexpr size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }
MOE_A2A_HD inline constexpr uint64_t make_flag(uint32_t epoch, uint32_t payload) {
  return (static_cast<uint64_t>(epoch) << 32) | payload;
}
MOE_A2A_HD inline constexpr uint32_t flag_epoch(uint64_t f) { return static_cast<uint32_t>(f >> 32); }
MOE_A2A_HD inline constexpr uint32_t flag_payload(uint64_t f) { return static_cast<uint32_t>(f); }

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
  size_t recv_x, recv_token, recv_expert, recv_weight, recv_count, comb_x, comb_w, dispatch_flag, combine_flag;
  size_t total;
};

struct WorkspaceLayout {
  size_t slot_counter, done_counter, epoch, expert_count, send_count, round_error;
  size_t total;
};

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

  MOE_A2A_HD int32_t experts_per_rank() const { return num_experts / world; }
  MOE_A2A_HD int32_t owner_rank(int32_t expert) const { return expert / experts_per_rank(); }
  MOE_A2A_HD size_t row_bytes() const { return static_cast<size_t>(hidden) * elem_bytes; }
  MOE_A2A_HD size_t rows_per_rank() const { return static_cast<size_t>(world) * max_tokens; }
  MOE_A2A_HD bool packed() const { return layout == Layout::kPacked; }
  // The worst case: padded, every token of every rank picked one expert; packed, every token
  // of every rank picked min(topk, experts_per_rank) experts of this rank.
  MOE_A2A_HD size_t worst_case_capacity() const {
    if (!packed()) return rows_per_rank();
    const int32_t per_token = topk < experts_per_rank() ? topk : experts_per_rank();
    return rows_per_rank() * static_cast<size_t>(per_token);
  }
  // Rows of expert_x seen as [rows, hidden].
  MOE_A2A_HD size_t output_rows() const {
    return packed() ? static_cast<size_t>(expert_capacity)
                    : static_cast<size_t>(experts_per_rank()) * static_cast<size_t>(expert_capacity);
  }

  MOE_A2A_HD HeapLayout heap_layout() const {
    HeapLayout l{};
    RegionCursor cursor;
    auto take = [&cursor](size_t bytes) { return cursor.take(bytes); };
    const size_t rows = rows_per_rank();
    l.recv_x = take(rows * row_bytes());
    l.recv_token = take(rows * sizeof(int32_t));
    l.recv_expert = take(rows * topk * sizeof(int32_t));
    l.recv_weight = take(rows * topk * sizeof(float));
    l.recv_count = take(static_cast<size_t>(world) * experts_per_rank() * sizeof(int32_t));
    l.comb_x = take(rows * row_bytes());
    l.comb_w = take(static_cast<size_t>(max_tokens) * topk * sizeof(float));
    l.dispatch_flag = take(world * sizeof(uint64_t));
    l.combine_flag = take(world * sizeof(uint64_t));
    l.total = cursor.end;
    return l;
  }

  MOE_A2A_HD WorkspaceLayout workspace_layout() const {
    WorkspaceLayout l{};
    RegionCursor cursor;
    auto take = [&cursor](size_t bytes) { return cursor.take(bytes); };
    l.slot_counter = take(world * sizeof(uint32_t));
    l.done_counter = take(kNumKernels * sizeof(uint32_t));
    l.epoch = take(sizeof(uint64_t));
    l.expert_count = take(static_cast<size_t>(experts_per_rank()) * sizeof(uint32_t));
    l.send_count = take(static_cast<size_t>(num_experts) * sizeof(uint32_t));
    l.round_error = take(sizeof(uint32_t));
    l.total = cursor.end;
    return l;
  }

  // Bytes of the output of one dispatch: expert_x.
  MOE_A2A_HD size_t expert_x_bytes() const { return output_rows() * row_bytes(); }
};

// Default per-expert capacity: the worst case when the padded output fits `budget_bytes`,
// else as many rows as fit (at least 1). Callers that know their routing pass their own.
inline int32_t default_expert_capacity(const EpConfig& c, size_t budget_bytes) {
  const size_t per_row = (c.packed() ? 1 : static_cast<size_t>(c.experts_per_rank())) * c.row_bytes();
  const size_t fit = per_row == 0 ? 0 : budget_bytes / per_row;
  const size_t worst = c.worst_case_capacity();
  const size_t cap = fit < worst ? fit : worst;
  return static_cast<int32_t>(cap < 1 ? 1 : cap);
}

// Empty string if the config is supported, else what is wrong (for the host to raise).
inline std::string validate(const EpConfig& c) {
  auto bad = [](const std::string& what) { return what; };
  if (c.world < 2 || c.world > kMaxWorld) return bad("world size must be in [2, 8], got " + std::to_string(c.world));
  if (c.rank < 0 || c.rank >= c.world) return bad("rank " + std::to_string(c.rank) + " outside the world");
  if (c.num_experts < c.world || c.num_experts > kMaxExperts)
    return bad("num_experts must be in [world, 512], got " + std::to_string(c.num_experts));
  if (c.num_experts % c.world != 0)
    return bad("num_experts (" + std::to_string(c.num_experts) + ") must be divisible by the world size (" +
               std::to_string(c.world) + ")");
  if (c.topk < 1 || c.topk > kMaxTopk || c.topk > c.num_experts)
    return bad("experts_per_token must be in [1, min(16, num_experts)], got " + std::to_string(c.topk));
  if (c.hidden < 8 || c.hidden > kMaxHidden || c.hidden % 8 != 0)
    return bad("hidden_dim must be a multiple of 8 in [8, 16384], got " + std::to_string(c.hidden));
  if (c.max_tokens < 1 || c.max_tokens > kMaxTokensPerRank)
    return bad("max_num_tokens must be in [1, 4096], got " + std::to_string(c.max_tokens));
  if (c.layout != Layout::kPadded && c.layout != Layout::kPacked) return bad("layout must be padded or packed");
  if (c.expert_capacity < 1 || static_cast<size_t>(c.expert_capacity) > c.worst_case_capacity())
    return bad(std::string(c.packed() ? "max_recv_tokens must be in [1, world * max_num_tokens * min(topk, experts "
                                        "per rank)] = [1, "
                                      : "max_recv_tokens_per_expert must be in [1, world * max_num_tokens] = [1, ") +
               std::to_string(c.worst_case_capacity()) + "], got " + std::to_string(c.expert_capacity));
  if (c.elem_bytes != 2 && c.elem_bytes != 4) return bad("token types must be 2 bytes (bf16, fp16) or 4 (fp32)");
  return {};
}

}  // namespace moe_a2a
