#include "bump_allocator.h"

#include "moe_a2a/platform/runtime.h"

namespace moe_a2a {

void BumpAllocator::mix(uint64_t v) {
  constexpr uint64_t kFnvPrime = 1099511628211ull;
  for (int i = 0; i < 8; ++i) {
    fingerprint_ ^= (v >> (8 * i)) & 0xffu;
    fingerprint_ *= kFnvPrime;
  }
}

size_t BumpAllocator::allocate(size_t bytes, size_t align) {
  MOE_A2A_CHECK(align != 0 && (align & (align - 1)) == 0, "symmetric heap alignment must be a power of two, got ",
                align);
  const size_t offset = (used_ + align - 1) / align * align;
  MOE_A2A_CHECK(offset >= used_ && offset <= capacity_ && bytes <= capacity_ - offset,
                "symmetric heap is full: asked for ", bytes, " bytes aligned to ", align, " with ", used_, " of ",
                capacity_, " bytes used");
  used_ = offset + bytes;
  ++count_;
  mix(bytes);
  mix(align);
  return offset;
}

}  // namespace moe_a2a
