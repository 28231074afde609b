// Device view of the symmetric heap: a plain struct, safe to pass by value to kernels.
// Every rank allocated a heap of the same size and made the same sequence of allocations,
// so an object at offset o on this rank is at offset o on every peer; translate() turns a
// pointer into the local heap into the pointer that reaches the same object on `peer`
// (through the IPC mapping this process opened for that peer).
#pragma once

#include <cstddef>
#include <cstdint>

#include "moe_a2a/platform/backend.h"

namespace moe_a2a {

inline constexpr int kMaxWorld = 8;

struct HeapView {
  uint8_t* bases[kMaxWorld];  // bases[rank] is the local heap; others are IPC mappings
  int32_t rank;
  int32_t world;
  size_t bytes;  // size of every rank's heap

  template <typename T>
  MOE_A2A_HD T* translate(T* local_ptr, int peer) const {
    const auto offset = reinterpret_cast<const uint8_t*>(local_ptr) - bases[rank];
    return reinterpret_cast<T*>(bases[peer] + offset);
  }
  MOE_A2A_HD uint8_t* at(int peer, size_t offset) const { return bases[peer] + offset; }
  MOE_A2A_HD bool contains_local(const void* p, size_t n) const {
    const auto* b = static_cast<const uint8_t*>(p);
    return b >= bases[rank] && b + n <= bases[rank] + bytes;
  }
};

}  // namespace moe_a2a
