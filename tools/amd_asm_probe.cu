// Probe for tools/check_amd_asm.sh: one extern "C" kernel per primitive of
// include/moe_a2a/platform/sync.h (plus device.h's wall_clock), so the gfx942 assembly of
// each can be read and grepped on its own. Never launched; compile-check / -S only.
#include <cstdint>

#include "moe_a2a/platform/device.h"
#include "moe_a2a/platform/sync.h"

using namespace moe_a2a;

extern "C" __global__ void probe_ld_acquire_sys_u32(const uint32_t* p, uint32_t* out) { *out = ld_acquire_sys(p); }
extern "C" __global__ void probe_ld_acquire_sys_u64(const uint64_t* p, uint64_t* out) { *out = ld_acquire_sys(p); }
extern "C" __global__ void probe_ld_relaxed_sys_u32(const uint32_t* p, uint32_t* out) { *out = ld_relaxed_sys(p); }
extern "C" __global__ void probe_ld_relaxed_sys_u64(const uint64_t* p, uint64_t* out) { *out = ld_relaxed_sys(p); }
extern "C" __global__ void probe_ld_poll_sys(const uint64_t* p, uint64_t* out) { *out = ld_poll_sys(p); }

extern "C" __global__ void probe_st_release_sys_u32(uint32_t* p, uint32_t v) { st_release_sys(p, v); }
extern "C" __global__ void probe_st_release_sys_u64(uint64_t* p, uint64_t v) { st_release_sys(p, v); }
extern "C" __global__ void probe_st_relaxed_sys_u32(uint32_t* p, uint32_t v) { st_relaxed_sys(p, v); }
extern "C" __global__ void probe_st_relaxed_sys_u64(uint64_t* p, uint64_t v) { st_relaxed_sys(p, v); }

extern "C" __global__ void probe_atomic_add_release_sys_u32(uint32_t* p, uint32_t v, uint32_t* out) {
  *out = atomic_add_release_sys(p, v);
}
extern "C" __global__ void probe_atomic_add_release_sys_u64(uint64_t* p, uint64_t v, uint64_t* out) {
  *out = atomic_add_release_sys(p, v);
}
extern "C" __global__ void probe_atomic_add_relaxed_gpu_u32(uint32_t* p, uint32_t v, uint32_t* out) {
  *out = atomic_add_relaxed_gpu(p, v);
}
extern "C" __global__ void probe_atomic_add_relaxed_gpu_u64(uint64_t* p, uint64_t v, uint64_t* out) {
  *out = atomic_add_relaxed_gpu(p, v);
}
extern "C" __global__ void probe_atomic_add_relaxed_block(uint32_t v, uint32_t* out) {
  __shared__ uint32_t counter;  // the value does not matter: only the instruction is checked
  *out = atomic_add_relaxed_block(&counter, v);
}
extern "C" __global__ void probe_atomic_or_relaxed_block(uint32_t v, uint32_t* out) {
  __shared__ uint32_t mask;  // the value does not matter: only the instruction is checked
  atomic_or_relaxed_block(&mask, v);
  __syncthreads();
  *out = mask;
}
extern "C" __global__ void probe_atomic_cas_sys_u32(uint32_t* p, uint32_t expected, uint32_t desired, uint32_t* out) {
  *out = atomic_cas_sys(p, expected, desired);
}
extern "C" __global__ void probe_atomic_cas_relaxed_gpu_u64(uint64_t* p, uint64_t expected, uint64_t desired,
                                                            uint64_t* out) {
  *out = atomic_cas_relaxed_gpu(p, expected, desired);
}

extern "C" __global__ void probe_fence_acq_rel_sys() { fence_acq_rel_sys(); }
extern "C" __global__ void probe_fence_acq_rel_gpu() { fence_acq_rel_gpu(); }

extern "C" __global__ void probe_wait_until_at_least_sys(const uint64_t* flag, uint64_t target, uint64_t timeout,
                                                         uint64_t* seen, int* ok) {
  *ok = wait_until_at_least_sys(flag, target, timeout, seen) ? 1 : 0;
}

extern "C" __global__ void probe_wall_clock(uint64_t* out) { *out = wall_clock(); }
