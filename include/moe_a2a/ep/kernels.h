// Launchers of the four EP kernels. Raw pointers and plain structs only (no torch), so the
// kernels build and are tested without torch. Each launcher enqueues on `stream` and never
// synchronises with the host.
#pragma once

#include <cstddef>
#include <cstdint>

#include "moe_a2a/ep/config.h"
#include "moe_a2a/errors.h"
#include "moe_a2a/heap.h"
#include "moe_a2a/platform/runtime.h"
#include "moe_a2a/profiler.h"

namespace moe_a2a {

enum class TokenType : int32_t { kBFloat16 = 0, kFloat16 = 1 };

// Everything a kernel needs to find the buffers of this all-to-all, on any rank.
struct EpContext {
  EpConfig cfg;
  HeapLayout heap_layout;          // cfg.heap_layout(), computed once on the host
  WorkspaceLayout ws_layout;       // cfg.workspace_layout()
  HeapView heap;                   // peer bases
  size_t ep_offset;                // offset of this all-to-all's region in every heap
  uint8_t* workspace;              // local scratch, see config.h
  ErrorRecord* error;              // host-mapped, device pointer
  uint64_t timeout_ticks;          // bound on every wait, in wall_clock() ticks
  TokenType token_type;
  int32_t num_blocks;              // grid size of every EP kernel
  // Last, so the other fields keep their offsets whether or not a build profiles; all zero
  // unless profiling (see include/moe_a2a/profiler.h).
  ProfilerView profiler;
};

#if defined(MOE_A2A_HAS_GPU)

struct DispatchSendArgs {
  const void* x;              // [num_tokens, hidden]
  const void* topk_idx;       // [num_tokens, topk], int32 or int64
  bool topk_idx_is_int64;
  const float* topk_weights;  // [num_tokens, topk]
  int32_t num_tokens;
};

struct DispatchRecvArgs {
  void* expert_x;              // [experts_per_rank, capacity, hidden]
  int32_t* expert_num_tokens;  // [experts_per_rank]
  int32_t* expert_meta;        // [experts_per_rank, capacity, 3]: src rank, src token, k
  float* expert_weights;       // [experts_per_rank, capacity]
};

struct CombineSendArgs {
  const void* expert_y;  // [experts_per_rank, capacity, hidden], the experts' outputs
};

struct CombineRecvArgs {
  void* out;             // [num_tokens, hidden]
  int32_t num_tokens;    // the num_tokens of the matching dispatch
};

void launch_dispatch_send(const EpContext& ctx, const DispatchSendArgs& args, hipStream_t stream);
void launch_dispatch_recv(const EpContext& ctx, const DispatchRecvArgs& args, hipStream_t stream);
void launch_combine_send(const EpContext& ctx, const CombineSendArgs& args, hipStream_t stream);
void launch_combine_recv(const EpContext& ctx, const CombineRecvArgs& args, hipStream_t stream);

#endif

}  // namespace moe_a2a
