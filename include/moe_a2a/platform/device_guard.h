// DeviceGuard: the library's device for one scope, the caller's current device again after it.
// Every host entry point that touches its GPU (allocation, synchronisation, IPC, a launch on the
// legacy stream) needs that GPU current, but the current device belongs to the caller: a process
// that is rank 0 on GPU 0 in one job and rank 1 on GPU 1 in the next (a reused worker) would
// otherwise allocate and launch its next work on the GPU our last call left current.
#pragma once

#include <new>

#include "moe_a2a/platform/runtime.h"

#if defined(MOE_A2A_HAS_GPU)

namespace moe_a2a {

// Switches only when the device differs, so the common call (the caller's device is ours already)
// costs one hipGetDevice and nothing to restore.
class DeviceGuard {
 public:
  // Makes `device` current; raises if the current device cannot be read or changed.
  explicit DeviceGuard(int device) {
    MOE_A2A_GPU_CHECK(hipGetDevice(&previous_));
    if (previous_ != device) {
      MOE_A2A_GPU_CHECK(hipSetDevice(device));
      switched_ = true;
    }
  }
  // Best effort, for cleanup that must not throw: on failure the current device stays as it was
  // (and the cleanup runs there, as well as it can).
  DeviceGuard(int device, const std::nothrow_t&) noexcept {
    if (hipGetDevice(&previous_) == hipSuccess && previous_ != device) switched_ = hipSetDevice(device) == hipSuccess;
  }
  // Errors are ignored: a destructor may run while an exception unwinds, and throwing then ends
  // the process.
  ~DeviceGuard() {
    if (switched_) (void)hipSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  bool switched_ = false;
};

}  // namespace moe_a2a

#endif
