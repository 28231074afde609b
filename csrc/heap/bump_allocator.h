// Host-side bump allocator over the symmetric heap's offset range. Every rank must make the
// same sequence of allocate() calls so that an object lives at the same offset everywhere;
// fingerprint() summarises the sequence so ranks can compare it cheaply.
#pragma once

#include <cstddef>
#include <cstdint>

namespace moe_a2a {

class BumpAllocator {
 public:
  explicit BumpAllocator(size_t capacity) : capacity_(capacity) {}

  // Offset of a new block of `bytes` aligned to `align` (a power of two). Throws moe_a2a::Error
  // when the heap is full or the alignment is not a power of two.
  size_t allocate(size_t bytes, size_t align);

  size_t used() const { return used_; }
  size_t capacity() const { return capacity_; }
  size_t num_allocations() const { return count_; }
  // FNV-1a over (bytes, align) of every call so far, in order.
  uint64_t fingerprint() const { return fingerprint_; }

 private:
  static constexpr uint64_t kFnvOffset = 1469598103934665603ull;
  void mix(uint64_t v);

  size_t capacity_;
  size_t used_ = 0;
  size_t count_ = 0;
  uint64_t fingerprint_ = kFnvOffset;
};

}  // namespace moe_a2a
