// Every memory-ordering primitive the kernels use, named op_semantics_scope. Kernels call
// these and never write inline asm or raw atomics themselves, so auditing the memory model
// means reading this one file (and, for AMD, the assembly check in tools/check_amd_asm.sh).
//
// Scope: peers are ordered only at *system* scope on both vendors, so everything another GPU
// reads or writes goes through the _sys variants. _gpu variants are for counters that only
// this GPU touches.
#pragma once

#include <cstdint>

#include "moe_a2a/platform/device.h"

namespace moe_a2a {

// True when `v` is `target` or later in serial-number order (the difference read as signed):
// counters that grow by one per round compare right across a wrap of 2^64, as long as the two
// are less than 2^63 apart.
MOE_A2A_HD inline constexpr bool reached(uint64_t v, uint64_t target) { return static_cast<int64_t>(v - target) >= 0; }

}  // namespace moe_a2a

#if defined(MOE_A2A_GPU_COMPILER)

namespace moe_a2a {

#if defined(MOE_A2A_HIP)

// gfx942: acquire load = global_load sc0 sc1 + buffer_inv sc0 sc1; release store =
// buffer_wbl2 sc0 sc1 + global_store sc0 sc1. The builtins pick those sequences for us.
#define MOE_A2A_DEFINE_LD_ST(T)                                                               \
  MOE_A2A_DEVICE MOE_A2A_INLINE T ld_acquire_sys(const T* p) {                                \
    return __hip_atomic_load(const_cast<T*>(p), __ATOMIC_ACQUIRE, __HIP_MEMORY_SCOPE_SYSTEM); \
  }                                                                                           \
  MOE_A2A_DEVICE MOE_A2A_INLINE T ld_relaxed_sys(const T* p) {                                \
    return __hip_atomic_load(const_cast<T*>(p), __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM); \
  }                                                                                           \
  MOE_A2A_DEVICE MOE_A2A_INLINE void st_release_sys(T* p, T v) {                              \
    __hip_atomic_store(p, v, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_SYSTEM);                    \
  }                                                                                           \
  MOE_A2A_DEVICE MOE_A2A_INLINE void st_relaxed_sys(T* p, T v) {                              \
    __hip_atomic_store(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);                    \
  }                                                                                           \
  MOE_A2A_DEVICE MOE_A2A_INLINE T atomic_add_release_sys(T* p, T v) {                         \
    return __hip_atomic_fetch_add(p, v, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_SYSTEM);         \
  }                                                                                           \
  MOE_A2A_DEVICE MOE_A2A_INLINE T atomic_add_relaxed_gpu(T* p, T v) {                         \
    return __hip_atomic_fetch_add(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);          \
  }
MOE_A2A_DEFINE_LD_ST(uint32_t)
MOE_A2A_DEFINE_LD_ST(uint64_t)
#undef MOE_A2A_DEFINE_LD_ST

MOE_A2A_DEVICE MOE_A2A_INLINE uint32_t atomic_cas_sys(uint32_t* p, uint32_t expected, uint32_t desired) {
  __hip_atomic_compare_exchange_strong(p, &expected, desired, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED,
                                       __HIP_MEMORY_SCOPE_SYSTEM);
  return expected;  // the value found: equals the argument when the swap happened
}
MOE_A2A_DEVICE MOE_A2A_INLINE uint64_t atomic_cas_relaxed_gpu(uint64_t* p, uint64_t expected, uint64_t desired) {
  __hip_atomic_compare_exchange_strong(p, &expected, desired, __ATOMIC_RELAXED, __ATOMIC_RELAXED,
                                       __HIP_MEMORY_SCOPE_AGENT);
  return expected;
}

// Counters in shared memory, seen only by this block.
MOE_A2A_DEVICE MOE_A2A_INLINE uint32_t atomic_add_relaxed_block(uint32_t* p, uint32_t v) {
  return __hip_atomic_fetch_add(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_WORKGROUP);
}
MOE_A2A_DEVICE MOE_A2A_INLINE void atomic_or_relaxed_block(uint32_t* p, uint32_t v) {
  __hip_atomic_fetch_or(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_WORKGROUP);
}

// The empty scope string is system scope for the amdgcn fence builtin.
MOE_A2A_DEVICE MOE_A2A_INLINE void fence_acq_rel_sys() { __builtin_amdgcn_fence(__ATOMIC_ACQ_REL, ""); }
MOE_A2A_DEVICE MOE_A2A_INLINE void fence_acq_rel_gpu() { __builtin_amdgcn_fence(__ATOMIC_ACQ_REL, "agent"); }

#else  // CUDA: PTX memory-model instructions (sm_70+).

#define MOE_A2A_DEFINE_LD_ST(T, SUF, CON)                                                                  \
  MOE_A2A_DEVICE MOE_A2A_INLINE T ld_acquire_sys(const T* p) {                                             \
    T v;                                                                                                   \
    asm volatile("ld.acquire.sys." SUF " %0, [%1];" : "=" CON(v) : "l"(p) : "memory");                     \
    return v;                                                                                              \
  }                                                                                                        \
  MOE_A2A_DEVICE MOE_A2A_INLINE T ld_relaxed_sys(const T* p) {                                             \
    T v;                                                                                                   \
    asm volatile("ld.relaxed.sys." SUF " %0, [%1];" : "=" CON(v) : "l"(p) : "memory");                     \
    return v;                                                                                              \
  }                                                                                                        \
  MOE_A2A_DEVICE MOE_A2A_INLINE void st_release_sys(T* p, T v) {                                           \
    asm volatile("st.release.sys." SUF " [%0], %1;" ::"l"(p), CON(v) : "memory");                          \
  }                                                                                                        \
  MOE_A2A_DEVICE MOE_A2A_INLINE void st_relaxed_sys(T* p, T v) {                                           \
    asm volatile("st.relaxed.sys." SUF " [%0], %1;" ::"l"(p), CON(v) : "memory");                          \
  }                                                                                                        \
  MOE_A2A_DEVICE MOE_A2A_INLINE T atomic_add_release_sys(T* p, T v) {                                      \
    T old;                                                                                                 \
    asm volatile("atom.release.sys.add." SUF " %0, [%1], %2;" : "=" CON(old) : "l"(p), CON(v) : "memory"); \
    return old;                                                                                            \
  }                                                                                                        \
  MOE_A2A_DEVICE MOE_A2A_INLINE T atomic_add_relaxed_gpu(T* p, T v) {                                      \
    T old;                                                                                                 \
    asm volatile("atom.relaxed.gpu.add." SUF " %0, [%1], %2;" : "=" CON(old) : "l"(p), CON(v) : "memory"); \
    return old;                                                                                            \
  }
#define MOE_A2A_CON_U32(x) "r"(x)
#define MOE_A2A_CON_U64(x) "l"(x)
MOE_A2A_DEFINE_LD_ST(uint32_t, "u32", MOE_A2A_CON_U32)
MOE_A2A_DEFINE_LD_ST(uint64_t, "u64", MOE_A2A_CON_U64)
#undef MOE_A2A_DEFINE_LD_ST
#undef MOE_A2A_CON_U32
#undef MOE_A2A_CON_U64

MOE_A2A_DEVICE MOE_A2A_INLINE uint32_t atomic_cas_sys(uint32_t* p, uint32_t expected, uint32_t desired) {
  uint32_t old;
  asm volatile("atom.acq_rel.sys.cas.b32 %0, [%1], %2, %3;"
               : "=r"(old)
               : "l"(p), "r"(expected), "r"(desired)
               : "memory");
  return old;
}
MOE_A2A_DEVICE MOE_A2A_INLINE uint64_t atomic_cas_relaxed_gpu(uint64_t* p, uint64_t expected, uint64_t desired) {
  uint64_t old;
  asm volatile("atom.relaxed.gpu.cas.b64 %0, [%1], %2, %3;"
               : "=l"(old)
               : "l"(p), "l"(expected), "l"(desired)
               : "memory");
  return old;
}

// Counters in shared memory, seen only by this block.
MOE_A2A_DEVICE MOE_A2A_INLINE uint32_t atomic_add_relaxed_block(uint32_t* p, uint32_t v) {
  uint32_t old;
  asm volatile("atom.relaxed.cta.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}
MOE_A2A_DEVICE MOE_A2A_INLINE void atomic_or_relaxed_block(uint32_t* p, uint32_t v) {
  asm volatile("red.relaxed.cta.or.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

MOE_A2A_DEVICE MOE_A2A_INLINE void fence_acq_rel_sys() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }
MOE_A2A_DEVICE MOE_A2A_INLINE void fence_acq_rel_gpu() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }

#endif

// A spin's look at a signal word (ld_poll_sys), and whether that look is itself an acquire
// (kPollAcquires). On NVIDIA an acquire load is the same system-scope load followed by an L1
// invalidation (ld.acquire.sys: LD.E.STRONG.SYS, CCTL.IVALL), no dearer a look, so every look is an
// acquire and the look that finds the word there needs no second load: one memory round trip less
// on each wait that spins. On gfx942 the acquire adds buffer_inv sc0 sc1 (the CU's L1 and the L2's
// non-coherent lines) to every look, so a spin looks relaxed and takes one acquire load after it.
#if defined(MOE_A2A_HIP)
inline constexpr bool kPollAcquires = false;
MOE_A2A_DEVICE MOE_A2A_INLINE uint64_t ld_poll_sys(const uint64_t* p) { return ld_relaxed_sys(p); }
#else
inline constexpr bool kPollAcquires = true;
MOE_A2A_DEVICE MOE_A2A_INLINE uint64_t ld_poll_sys(const uint64_t* p) { return ld_acquire_sys(p); }
#endif

// The one bounded spin of the library: calls look() until it returns true (true), or until
// `timeout_ticks` of wall_clock() have passed or `*give_up` (if given) is non-zero, checked
// every kGiveUpEvery looks so that the looks' loads stay back to back (false). look() is one
// look: its loads, then the test. The waits of the kernels go through here (a wave that waits
// as one, await_some_signals in csrc/ep/ep_device.cuh, spins on its own: its exit is a ballot).
inline constexpr uint32_t kGiveUpEvery = 64;
template <typename Look>
MOE_A2A_DEVICE MOE_A2A_INLINE bool spin_bounded(Look look, uint64_t timeout_ticks, const uint64_t* give_up) {
  const uint64_t start = wall_clock();
  // Reading the clock every look costs little next to a remote-visible load.
  for (uint32_t spins = 1; !look(); ++spins) {
    if (wall_clock() - start > timeout_ticks) return false;
    if (give_up != nullptr && spins % kGiveUpEvery == 0 && ld_relaxed_sys(give_up) != 0) return false;
  }
  return true;
}

// Bounded wait: one acquire load; if the flag has not reached target yet (serial-number
// order, see reached()), spin with ld_poll_sys (no fence in the loop) until it has, then, where
// those looks are relaxed (kPollAcquires false: AMD), take one acquire load so the data published
// before the flag is visible (spin_bounded: timeout_ticks, give_up). Returns true on success; otherwise returns false and
// leaves the last value seen in *last_seen.
MOE_A2A_DEVICE inline bool wait_until_at_least_sys(const uint64_t* flag, uint64_t target, uint64_t timeout_ticks,
                                                   uint64_t* last_seen, const uint64_t* give_up = nullptr) {
  // A flag that is already there (a late waiter) costs one acquire load.
  uint64_t v = ld_acquire_sys(flag);
  if (!reached(v, target)) {
    if (!spin_bounded([&] { return reached(v = ld_poll_sys(flag), target); }, timeout_ticks, give_up)) {
      *last_seen = v;
      return false;
    }
    if (!kPollAcquires) v = ld_acquire_sys(flag);
  }
  *last_seen = v;
  return true;
}

}  // namespace moe_a2a

#endif  // device code
