// Launchers of the EP kernels. Raw pointers and plain structs only (no torch), so the kernels
// build and are tested without torch. Each launcher enqueues on `stream` and never
// synchronises with the host.
//
// A round is one exchange out and back; every rank runs the same rounds in the same order
// (the table of rounds is in csrc/ep/engine.cu, the protocol in docs/design/protocol.md):
//   forward:              dispatch (send, recv) -> combine (send, recv)
//   backward of dispatch: combine (unweighted, after every rank's start signal)
//   backward of combine:  combine_backward (grad_out out, weight gradients back)
// dispatch and combine are one kernel each; a launch runs the send half, the receive half or
// both (Role), so the fused calls are one launch and the split calls one launch per half. The
// backward of combine is one kernel and one launch.
// What a round leaves for later rounds of the same tokens (its routes) is written into
// caller-owned buffers, SendRoute on the token side and RecvRoute on the expert side, so a
// backward pass replays exactly the placement of its forward pass.
#pragma once

#include <cstddef>
#include <cstdint>

#include "moe_a2a/divisor.h"
#include "moe_a2a/ep/config.h"
#include "moe_a2a/errors.h"
#include "moe_a2a/heap.h"
#include "moe_a2a/platform/runtime.h"
#include "moe_a2a/profiler.h"

namespace moe_a2a {

enum class TokenType : int32_t { kBFloat16 = 0, kFloat16 = 1, kFloat32 = 2 };

// Everything a kernel needs to find the buffers of this all-to-all, on any rank.
struct EpContext {
  EpConfig cfg;
  HeapLayout heap_layout;     // cfg.heap_layout(), computed once on the host
  WorkspaceLayout ws_layout;  // cfg.workspace_layout()
  HeapView heap;              // peer bases
  size_t ep_offset;           // offset of this all-to-all's region in every heap
  uint8_t* workspace;         // local scratch, see config.h
  ErrorRecord* error;         // host-mapped, device pointer
  uint64_t timeout_ticks;     // bound on every wait, in wall_clock() ticks
  TokenType token_type;
  // cfg.experts_per_rank() and cfg.topk as divisors (divisor.h): the kernels divide by them at many
  // sites (owner_rank_of, pair_of in csrc/ep/ep_device.cuh), each a software routine otherwise.
  Divisor local_experts;
  Divisor topk;
  // Launch dispatch and combine early, while the kernel before them on the stream finishes
  // (platform/launch.h; docs/design/protocol.md, "Kernel boundaries").
  bool early_launch;
  // The most bytes of expert_y that the backward of combine asks of L2 before its answers read them
  // (prefetch_y in csrc/ep/combine_backward.cu): a third of L2 where prefetch_l2 fetches, else 0.
  size_t y_prefetch_bytes;
  // cfg.max_group_tokens(), computed once on the host: in a kernel it is two divisions, each a
  // software routine (dispatch's own_placed asks it once a launch; its code is on the critical path).
  int32_t max_group_tokens;
  // Last, so the other fields keep their offsets whether or not a build profiles; all zero
  // unless profiling (see include/moe_a2a/profiler.h).
  ProfilerView profiler;
};

#if defined(MOE_A2A_HAS_GPU)

// Which halves of dispatch or combine one launch runs.
enum class Role : int32_t { kSend = 1, kRecv = 2, kBoth = 3 };
MOE_A2A_HD inline bool sends(Role r) { return (static_cast<int32_t>(r) & 1) != 0; }
MOE_A2A_HD inline bool receives(Role r) { return (static_cast<int32_t>(r) & 2) != 0; }
// Whether a launch may move this rank's own rows without the heap: a fused one of `from` tokens or
// more (kOwnRowsDirectTokens; a dispatch of plain rows at world 2, kOwnPlacedCopyTokens). The launchers pick
// the instance of dispatch_kernel and combine_kernel that has that code only then: below, it is
// code a launch never runs but fetches (docs/design/protocol.md, "Code size").
inline bool own_rows_instance(Role role, int32_t num_tokens, int32_t from = kOwnRowsDirectTokens) {
  return role == Role::kBoth && num_tokens >= from;
}

// Token side of a dispatch: which ranks each token went to.
struct SendRoute {
  int32_t* dest_mask;  // [num_tokens]: the ranks each token went to, and its unused slots (below)
  int32_t num_tokens;
};

// dest_mask[t]: bit r (r < kMaxWorld) set when token t went to rank r; bit kUnusedSlotBit + k set
// when its slot k is unused (kMaskedSlot), so that combine's backward gives that weight a zero
// gradient without the caller masking it (no expert answers for the slot). Readers of the ranks
// mask with all_ranks(world).
inline constexpr int kUnusedSlotBit = kMaxWorld;
static_assert(kUnusedSlotBit + kMaxTopk <= 31, "dest_mask holds the ranks and the unused slots");
MOE_A2A_HD inline bool slot_unused(int32_t dest_word, int k) { return (dest_word >> (kUnusedSlotBit + k)) & 1; }

// Expert side of a dispatch: where each received row went. Source s sent src_tokens[s]
// tokens, split into token groups (EpConfig::token_group); the rows of group g fill the first
// slots of [group begin, group end) of index s * max_tokens + slot, and the other slots of the
// group have token -1 and positions -1.
struct RecvRoute {
  int32_t* src_tokens;  // [world]: tokens each source dispatched
  int32_t* token;       // [world * max_tokens]: source token of each slot's row, or -1
  int32_t* pos;         // [world * max_tokens, topk]: row of expert_x holding (row, k), or
                        // negative: -1 no expert here, kDroppedPair its expert's rows full
};

// RecvRoute::pos of a pair for a local expert that had no row left (the overflow is reported
// with the segments): it has no output, so its weight gradient is 0, which the backward of
// combine sends its token rank like any answer (that rank awaits a word for every used pair).
inline constexpr int32_t kDroppedPair = -2;

struct DispatchArgs {
  // send half
  const void* x;  // [num_tokens, hidden]: the token type, or fp8 bytes when x_scale is given
  // fp8 rows (EpConfig::fp8) quantized by the caller: [num_tokens, scale_blocks] scales of x.
  // nullptr: x is in the token type (and with fp8 rows dispatch quantizes it).
  const float* x_scale;
  const void* topk_idx;  // [num_tokens, topk], int32 or int64
  bool topk_idx_is_int64;
  const float* topk_weights;  // [num_tokens, topk]
  SendRoute route;            // written
  // receive half
  void* expert_x;              // [output_rows, hidden] (padded: [experts_per_rank, capacity, hidden])
  float* expert_x_scale;       // fp8 rows: [output_rows, scale_blocks]; else unused
  int32_t* expert_num_tokens;  // [experts_per_rank]
  int32_t* expert_offsets;     // [experts_per_rank + 1]: first row of each expert; last = rows used
  int32_t* expert_meta;        // [output_rows, 3]: src rank, src token, k
  float* expert_weights;       // [output_rows]
  RecvRoute recv_route;        // written
};

struct CombineArgs {
  // send half (expert side)
  const void* expert_y;         // [output_rows, hidden], the experts' outputs
  const float* expert_weights;  // [output_rows] router weights; nullptr: unweighted sum
  RecvRoute recv_route;         // of the dispatch being combined (or differentiated)
  // Backward of dispatch: no dispatch precedes this combine in its round, so unless the round
  // before was a backward of combine the ranks first agree that every comb_x is free (each
  // combine publishes a start signal; this one then waits for all of them before writing). Set
  // by EpEngine::dispatch_backward.
  bool await_ready;
  // Backward of dispatch with the router weights applied at the experts (AllToAll's
  // weights_at_experts; docs/design/weights-at-experts.md): the expert side sends every used pair's
  // weight gradient back to its token's rank as a flagged comb_w word (0 for a pair dropped at
  // dispatch), and the token side, if it asked, awaits them. Every rank of the round sets it alike.
  bool sends_weight_grads;
  const float* pair_weight_grads;  // send half: [output_rows], the gradient of expert_weights; nullptr: 0
  // receive half (token side)
  void* out;                 // [num_tokens, hidden]
  float* grad_topk_weights;  // with sends_weight_grads: [num_tokens, topk]; nullptr: not asked
  SendRoute route;           // of the matching dispatch
};

// Backward of combine, one launch. Token side: grad_out[t] goes to every rank that token t went
// to, into recv_x at index t; later the weight gradients come back into grad_topk_weights.
// Expert side: grad_expert_y[row] = weight[row] * grad_out[token of row], and the weight
// gradient <grad_out[token], expert_y[row]> goes back to the token's rank. Rows of no expert
// get a zero gradient (combine never reads them); the dispatch's expert_offsets /
// expert_num_tokens say which rows those are.
struct CombineBackwardArgs {
  // token side
  const void* grad_out;      // [num_tokens, hidden]
  float* grad_topk_weights;  // [num_tokens, topk]; nullptr: none wanted (the expert ranks skip
                             // this rank's dot products, told by its grad signals)
  SendRoute route;
  // expert side
  const void* expert_y;              // [output_rows, hidden] saved by the forward pass
  const float* expert_weights;       // [output_rows]; nullptr: 1 (the combine was unweighted)
  const int32_t* expert_offsets;     // [experts_per_rank + 1]
  const int32_t* expert_num_tokens;  // [experts_per_rank]
  void* grad_expert_y;               // [output_rows, hidden], written whole
  RecvRoute recv_route;
};

void launch_dispatch(const EpContext& ctx, const DispatchArgs& args, Role role, hipStream_t stream);
void launch_combine(const EpContext& ctx, const CombineArgs& args, Role role, hipStream_t stream);
void launch_combine_backward(const EpContext& ctx, const CombineBackwardArgs& args, hipStream_t stream);

#endif

}  // namespace moe_a2a
