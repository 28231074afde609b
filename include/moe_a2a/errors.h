// What a kernel reports when it cannot finish normally. Lives in host-mapped pinned memory so
// the host can read it without synchronising; the first of this rank's own errors in a call wins,
// later ones are dropped, and a peer's report (kPeerError) is raised only where there is none.
// Shared by kernels (writers) and the host object that turns it into an exception.
#pragma once

#include <cstdint>

namespace moe_a2a {

enum class ErrorCode : uint32_t {
  kOk = 0,
  kTimeout = 1,           // a kernel waited too long for a peer's signal (detail: WaitSite)
  kBadExpertId = 2,       // topk_idx held an id outside [0, num_experts)
  kCapacityOverflow = 3,  // more tokens for one local expert than expert_capacity
  kPeerError = 4,         // a peer hit an error in this call (its own exception says which)
  kBadRoute = 5,          // a route given back to a later round is not one a dispatch wrote
};

// Where a kernel waited, for timeout messages: which call waited for which signal. One entry
// per wait of the protocol (docs/design/protocol.md).
#define MOE_A2A_WAIT_SITES(X)                                                   \
  X(kDispatchCounts, "dispatch-recv", "token counts")                           \
  X(kDispatchRows, "dispatch-recv", "rows of token group")                      \
  X(kCombinePartials, "combine-recv", "partial sums of combine unit")           \
  X(kDispatchGradReady, "combine-send (backward of dispatch)", "combine start") \
  X(kOutputGrad, "combine-backward", "output gradients of token group")         \
  X(kWeightGrad, "combine-backward", "weight gradients of token group")         \
  X(kCombineStart, "combine-recv", "combine start")                             \
  X(kDispatchGradWeights, "combine-recv (backward of dispatch)", "weight gradients of combine unit")

enum class WaitSite : int32_t {
#define MOE_A2A_WAIT_ENUM(id, call, signal) id,
  MOE_A2A_WAIT_SITES(MOE_A2A_WAIT_ENUM)
#undef MOE_A2A_WAIT_ENUM
      kCount
};
inline constexpr const char* kWaitSiteCall[] = {
#define MOE_A2A_WAIT_CALL(id, call, signal) call,
    MOE_A2A_WAIT_SITES(MOE_A2A_WAIT_CALL)
#undef MOE_A2A_WAIT_CALL
};
inline constexpr const char* kWaitSiteSignal[] = {
#define MOE_A2A_WAIT_SIGNAL(id, call, signal) signal,
    MOE_A2A_WAIT_SITES(MOE_A2A_WAIT_SIGNAL)
#undef MOE_A2A_WAIT_SIGNAL
};
static_assert(sizeof(kWaitSiteCall) / sizeof(kWaitSiteCall[0]) == static_cast<int>(WaitSite::kCount));

struct ErrorRecord {
  uint32_t code;      // ErrorCode; written last, by an acquire-release swap
  uint32_t claimed;   // first writer wins this word; the host waits for the code of a claim it sees
  int32_t peer;       // rank waited for / that reported; -1 if none
  int32_t detail;     // bad expert id, local expert that overflowed, WaitSite, ...
  int64_t index;      // token index, token group, ...
  uint64_t expected;  // epoch waited for, capacity, ...
  uint64_t seen;      // epoch last seen, count reached, ...
  // 1 + the first peer whose signal carried the error bit (kPeerError), 0 if none. Kept apart: a
  // peer's report never claims the record, so this rank's own error is the one raised. The device
  // writes this rank's own error before anything it sends could bring a peer's report back, and the
  // host reads this word before `code` (protocol.md, "Errors travel in signals").
  uint32_t peer_report;
};

}  // namespace moe_a2a
