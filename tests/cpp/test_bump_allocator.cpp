// Host-side bump allocator of the symmetric heap (csrc/heap/bump_allocator.h): offsets,
// alignment, failures, and the fingerprint ranks compare to catch diverging call sequences.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "heap/bump_allocator.h"
#include "moe_a2a/platform/runtime.h"

namespace {

using moe_a2a::BumpAllocator;

uint64_t fingerprint_of(const std::vector<std::pair<size_t, size_t>>& calls, size_t capacity = 1 << 20) {
  BumpAllocator a(capacity);
  for (const auto& c : calls) a.allocate(c.first, c.second);
  return a.fingerprint();
}

TEST(BumpAllocator, StartsEmpty) {
  BumpAllocator a(4096);
  EXPECT_EQ(a.capacity(), 4096u);
  EXPECT_EQ(a.used(), 0u);
  EXPECT_EQ(a.num_allocations(), 0u);
}

TEST(BumpAllocator, OffsetsAreAlignedAndConsecutive) {
  BumpAllocator a(1 << 20);
  EXPECT_EQ(a.allocate(10, 1), 0u);
  EXPECT_EQ(a.used(), 10u);
  EXPECT_EQ(a.allocate(4, 16), 16u);  // 10 rounded up to 16
  EXPECT_EQ(a.used(), 20u);
  EXPECT_EQ(a.allocate(1, 256), 256u);
  EXPECT_EQ(a.allocate(3, 1), 257u);      // align 1 packs tightly
  EXPECT_EQ(a.allocate(8, 8), 264u);      // 260 -> 264
  EXPECT_EQ(a.allocate(0, 4096), 4096u);  // empty block still gets an aligned offset
  EXPECT_EQ(a.used(), 4096u);
  EXPECT_EQ(a.allocate(100, 4096), 4096u);  // already aligned: no padding
  EXPECT_EQ(a.used(), 4196u);
  EXPECT_EQ(a.num_allocations(), 7u);
}

TEST(BumpAllocator, EveryOffsetIsAMultipleOfItsAlignment) {
  BumpAllocator a(1 << 24);
  size_t prev_end = 0;
  for (size_t i = 0; i < 200; ++i) {
    const size_t align = size_t{1} << (i % 13);
    const size_t bytes = (i * 7919) % 5000;
    const size_t off = a.allocate(bytes, align);
    EXPECT_EQ(off % align, 0u) << "call " << i;
    EXPECT_GE(off, prev_end) << "call " << i << " overlaps the previous block";
    EXPECT_LT(off - prev_end, align) << "call " << i << " padded more than needed";
    prev_end = off + bytes;
    EXPECT_EQ(a.used(), prev_end);
  }
}

TEST(BumpAllocator, FillsExactlyToCapacity) {
  BumpAllocator a(1024);
  EXPECT_EQ(a.allocate(512, 256), 0u);
  EXPECT_EQ(a.allocate(512, 256), 512u);
  EXPECT_EQ(a.used(), 1024u);
  EXPECT_EQ(a.allocate(0, 1), 1024u);  // zero bytes at the very end still fits
}

TEST(BumpAllocator, FullHeapThrows) {
  BumpAllocator a(1000);
  a.allocate(600, 8);
  EXPECT_THROW(a.allocate(401, 1), moe_a2a::Error);
  EXPECT_NO_THROW(a.allocate(400, 1));
  EXPECT_THROW(a.allocate(1, 1), moe_a2a::Error);
}

TEST(BumpAllocator, PaddingCountsTowardsCapacity) {
  BumpAllocator a(1024);
  a.allocate(1, 1);
  // 1000 bytes would fit after offset 1, but not after the 512-byte alignment.
  EXPECT_THROW(a.allocate(1000, 512), moe_a2a::Error);
  // Aligned offset itself past the end.
  BumpAllocator b(1000);
  b.allocate(999, 1);
  EXPECT_THROW(b.allocate(0, 1024), moe_a2a::Error);
}

TEST(BumpAllocator, HugeRequestsDoNotWrapAround) {
  BumpAllocator a(4096);
  a.allocate(100, 1);
  EXPECT_THROW(a.allocate(SIZE_MAX, 1), moe_a2a::Error);
  EXPECT_THROW(a.allocate(SIZE_MAX - 50, 1), moe_a2a::Error);
  EXPECT_THROW(a.allocate(8, size_t{1} << 63), moe_a2a::Error);  // aligned offset past the end
  // Rounding the offset up wraps around size_t: must not hand out a block at a small offset.
  BumpAllocator big(SIZE_MAX);
  big.allocate(SIZE_MAX - 10, 1);
  EXPECT_THROW(big.allocate(1, size_t{1} << 63), moe_a2a::Error);
  EXPECT_THROW(big.allocate(11, 1), moe_a2a::Error);
  EXPECT_EQ(big.allocate(10, 1), SIZE_MAX - 10);
}

TEST(BumpAllocator, FailedCallLeavesStateUnchanged) {
  BumpAllocator a(1000);
  a.allocate(600, 8);
  const size_t used = a.used();
  const size_t count = a.num_allocations();
  const uint64_t fp = a.fingerprint();
  EXPECT_THROW(a.allocate(500, 8), moe_a2a::Error);
  EXPECT_THROW(a.allocate(8, 3), moe_a2a::Error);
  EXPECT_EQ(a.used(), used);
  EXPECT_EQ(a.num_allocations(), count);
  EXPECT_EQ(a.fingerprint(), fp);
}

TEST(BumpAllocator, FullHeapMessageSaysWhat) {
  BumpAllocator a(1000);
  a.allocate(600, 8);
  try {
    a.allocate(500, 8);
    FAIL() << "expected moe_a2a::Error";
  } catch (const moe_a2a::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("full"), std::string::npos) << what;
    EXPECT_NE(what.find("500"), std::string::npos) << what;
    EXPECT_NE(what.find("1000"), std::string::npos) << what;
  }
}

TEST(BumpAllocator, NonPowerOfTwoAlignmentThrows) {
  BumpAllocator a(1 << 20);
  for (size_t bad : {size_t{0}, size_t{3}, size_t{6}, size_t{12}, size_t{100}, size_t{255}, size_t{257}}) {
    EXPECT_THROW(a.allocate(16, bad), moe_a2a::Error) << "align " << bad;
  }
  try {
    a.allocate(16, 24);
    FAIL() << "expected moe_a2a::Error";
  } catch (const moe_a2a::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("power of two"), std::string::npos) << what;
    EXPECT_NE(what.find("24"), std::string::npos) << what;
  }
  for (size_t good = 1; good <= (size_t{1} << 16); good <<= 1) {
    EXPECT_NO_THROW(a.allocate(1, good)) << "align " << good;
  }
}

TEST(BumpAllocator, ErrorIsARuntimeError) {
  BumpAllocator a(16);
  EXPECT_THROW(a.allocate(17, 1), std::runtime_error);  // what Python sees as RuntimeError
}

TEST(BumpAllocator, FingerprintEqualForEqualSequences) {
  const std::vector<std::pair<size_t, size_t>> seq = {{1024, 256}, {4, 4}, {65536, 4096}, {0, 1}, {7, 8}};
  EXPECT_EQ(fingerprint_of(seq), fingerprint_of(seq));
  // The heap capacity is not part of the fingerprint, only the call sequence.
  EXPECT_EQ(fingerprint_of(seq, 1 << 20), fingerprint_of(seq, 1 << 24));
  // Two allocators driven in lockstep agree after every call.
  BumpAllocator a(1 << 20), b(1 << 20);
  EXPECT_EQ(a.fingerprint(), b.fingerprint());
  for (const auto& c : seq) {
    EXPECT_EQ(a.allocate(c.first, c.second), b.allocate(c.first, c.second));
    EXPECT_EQ(a.fingerprint(), b.fingerprint());
  }
}

TEST(BumpAllocator, FingerprintDiffersForDifferentSize) {
  EXPECT_NE(fingerprint_of({{1024, 256}, {64, 64}}), fingerprint_of({{1024, 256}, {65, 64}}));
  EXPECT_NE(fingerprint_of({{1024, 256}}), fingerprint_of({{1025, 256}}));
  // Same offsets and same used() but a different recorded size still differs.
  EXPECT_NE(fingerprint_of({{1, 256}, {8, 8}}), fingerprint_of({{2, 256}, {8, 8}}));
}

TEST(BumpAllocator, FingerprintDiffersForDifferentAlignment) {
  EXPECT_NE(fingerprint_of({{256, 256}}), fingerprint_of({{256, 128}}));
}

TEST(BumpAllocator, FingerprintDiffersForDifferentOrder) {
  EXPECT_NE(fingerprint_of({{64, 64}, {128, 64}}), fingerprint_of({{128, 64}, {64, 64}}));
  EXPECT_NE(fingerprint_of({{16, 16}, {16, 256}}), fingerprint_of({{16, 256}, {16, 16}}));
}

TEST(BumpAllocator, FingerprintDiffersForDifferentCount) {
  EXPECT_NE(fingerprint_of({}), fingerprint_of({{0, 1}}));
  EXPECT_NE(fingerprint_of({{8, 8}}), fingerprint_of({{8, 8}, {8, 8}}));
}

}  // namespace
