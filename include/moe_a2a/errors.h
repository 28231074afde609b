// What a kernel reports when it cannot finish normally. Lives in host-mapped pinned memory so
// the host can read it without synchronising; the first error of a call wins, later ones are
// dropped. Shared by kernels (writers) and the host object that turns it into an exception.
#pragma once

#include <cstdint>

namespace moe_a2a {

enum class ErrorCode : uint32_t {
  kOk = 0,
  kDispatchTimeout = 1,   // dispatch-recv waited too long for a peer's token count
  kCombineTimeout = 2,    // combine-recv waited too long for a peer's partial sums
  kBadExpertId = 3,       // topk_idx held an id outside [0, num_experts)
  kCapacityOverflow = 4,  // more tokens for one local expert than expert_capacity
  kPeerError = 5,         // a peer hit an error in this call (its own exception says which)
  kBadRoute = 6,          // a route given back to a later round is not one a dispatch wrote
};

struct ErrorRecord {
  uint32_t code;     // ErrorCode; written last, with release semantics
  uint32_t claimed;  // first writer wins this word
  int32_t peer;      // rank waited for / that reported; -1 if none
  int32_t detail;    // bad expert id, local expert that overflowed, ...
  int64_t index;     // token index, flag index, ...
  uint64_t expected; // flag value waited for, capacity, ...
  uint64_t seen;     // flag value last seen, count reached, ...
};

inline const char* error_code_name(ErrorCode c) {
  switch (c) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kDispatchTimeout: return "dispatch timeout";
    case ErrorCode::kCombineTimeout: return "combine timeout";
    case ErrorCode::kBadExpertId: return "expert id out of range";
    case ErrorCode::kCapacityOverflow: return "expert capacity overflow";
    case ErrorCode::kPeerError: return "error on a peer";
    case ErrorCode::kBadRoute: return "corrupted route";
  }
  return "unknown";
}

}  // namespace moe_a2a
