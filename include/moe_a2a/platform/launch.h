// Kernel launches that may overlap the kernel before them on the stream (NVIDIA's programmatic
// dependent launch, compute capability 9.0+), and the device call such a kernel starts with; and
// how a kernel reads its arguments where the launch put them (MOE_A2A_READ_IN_PLACE).
//
// Between two dependent kernels a stream (or a CUDA graph) leaves about 1.1 us on an H200: the
// first grid drains and flushes, then the second is launched and its blocks are placed. Launched
// early, the next kernel's blocks are placed on the SMs that the running kernel's finished blocks
// free, and wait there (await_prior_kernels) until that kernel is done and its memory visible:
// what a kernel reads after the wait is what it would read after a plain launch. AMD has no such
// launch: there it is a plain launch and the device call is nothing. Which kernels use it, and
// what it measured: docs/design/protocol.md, "Kernel boundaries".
#pragma once

#include "moe_a2a/platform/backend.h"
#include "moe_a2a/platform/runtime.h"

#include <cstdlib>
#include <utility>

namespace moe_a2a {

#if defined(MOE_A2A_GPU_COMPILER)
// First thing of a kernel that may be launched early (launch_kernel(..., early = true)): waits
// until every kernel before it on the stream has finished and its writes are visible. Then, with
// `let_next_launch`, lets an early-launched next kernel be placed at once, while this one runs
// (otherwise it is placed when this one's last block has exited). A no-op for a plain launch,
// and on AMD.
MOE_A2A_DEVICE MOE_A2A_INLINE void await_prior_kernels(bool let_next_launch) {
#if defined(MOE_A2A_CUDA_ARCH) && MOE_A2A_CUDA_ARCH >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (let_next_launch) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#else
  (void)let_next_launch;
#endif
}

// The kernel's first two parameters, declared as `name0_passed` and `name1_passed`, bound to `name0` and `name1`
// where its launch put them: MOE_A2A_READ_IN_PLACE(c, a) in a kernel (EpContext c_passed, XArgs a_passed, ...).
// On AMD a kernel's arguments lie in its kernarg segment from offset 0, in order, each at its alignment, as the
// members of LeadingArguments lie. Named as parameters, an argument whose address reaches a function that is not
// inlined (the round's kernels hand `const EpContext&` and their args down) is first copied into every lane's
// scratch, and every read of it is then a vector load from there; read in place, the kernel's own reads are scalar
// loads (what it measured: docs/design/architecture.md, "MI300X: kernel resources"). NVIDIA's compiler reads
// parameters in place already: there the names bind to the parameters, a plain reference each (a helper function
// in between changed the machine code of some instances).
#if defined(MOE_A2A_HIP)
template <typename A, typename B>
struct LeadingArguments {
  A first;
  B second;
};

template <typename A, typename B>
MOE_A2A_DEVICE MOE_A2A_INLINE const LeadingArguments<A, B>& leading_arguments() {
  // The builtin's pointer is in the constant address space; a C-style cast makes it a generic one.
  return *(const LeadingArguments<A, B>*)__builtin_amdgcn_kernarg_segment_ptr();
}
#define MOE_A2A_READ_IN_PLACE(name0, name1)                                                          \
  (void)name0##_passed;                                                                              \
  (void)name1##_passed;                                                                              \
  const auto& name0 = leading_arguments<decltype(name0##_passed), decltype(name1##_passed)>().first; \
  const auto& name1 = leading_arguments<decltype(name0##_passed), decltype(name1##_passed)>().second
#else
#define MOE_A2A_READ_IN_PLACE(name0, name1) \
  const auto& name0 = name0##_passed;       \
  const auto& name1 = name1##_passed
#endif
#endif  // device code

#if defined(MOE_A2A_HAS_GPU)
// Whether kernels on `device` may be launched early: NVIDIA compute capability 9.0+, built with
// CUDA 12.3+ (the first whose graph capture keeps such a launch), unless MOE_A2A_EARLY_LAUNCH=0 (a
// diagnostic switch: one build timed both ways).
inline bool early_launch_supported(int device) {
  const char* env = std::getenv("MOE_A2A_EARLY_LAUNCH");
  if (env != nullptr && env[0] == '0') return false;
#if defined(MOE_A2A_CUDA) && CUDART_VERSION >= 12030
  int major = 0;
  MOE_A2A_GPU_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major >= 9;
#else
  (void)device;
  return false;
#endif
}

// kernel<<<grid, block, 0, stream>>>(args...), launched early where `early` (see above; the
// kernel must start with await_prior_kernels()). Throws on a launch error.
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, hipStream_t stream, bool early, Args&&... args) {
#if defined(MOE_A2A_CUDA)
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  config.attrs = early ? &attribute : nullptr;
  config.numAttrs = early ? 1 : 0;
  MOE_A2A_GPU_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
#else
  (void)early;
  hipLaunchKernelGGL(kernel, grid, block, 0, stream, std::forward<Args>(args)...);
  MOE_A2A_GPU_CHECK(hipGetLastError());
#endif
}
#endif

}  // namespace moe_a2a
