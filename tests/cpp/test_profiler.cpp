// Profiler record format (include/moe_a2a/profiler.h) and its host decoding
// (csrc/profiler/records.h): the device and the exporter agree on these bytes.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "moe_a2a/profiler.h"
#include "profiler/records.h"

namespace {

using moe_a2a::decode_profile;
using moe_a2a::kNumProfilerEvents;
using moe_a2a::make_profiler_record;
using moe_a2a::ProfilerEvent;
using moe_a2a::ProfilerRecord;

TEST(ProfilerRecord, WireLayout) {
  EXPECT_EQ(sizeof(ProfilerRecord), 24u);
  EXPECT_EQ(offsetof(ProfilerRecord, start), 0u);
  EXPECT_EQ(offsetof(ProfilerRecord, end), 8u);
  EXPECT_EQ(offsetof(ProfilerRecord, event), 16u);
  EXPECT_EQ(offsetof(ProfilerRecord, wave), 18u);
  EXPECT_EQ(offsetof(ProfilerRecord, arg), 20u);
}

TEST(ProfilerRecord, EncodesEveryField) {
  const uint64_t big = 0xfedcba9876543210ull;  // %globaltimer values use all 64 bits
  const auto r = make_profiler_record(ProfilerEvent::kCombineWait, 7, big, big + 5, -1);
  EXPECT_EQ(r.start, big);
  EXPECT_EQ(r.end, big + 5);
  EXPECT_EQ(r.event, static_cast<uint16_t>(ProfilerEvent::kCombineWait));
  EXPECT_EQ(r.wave, 7);
  EXPECT_EQ(r.arg, -1);
  const auto t = make_profiler_record(ProfilerEvent::kDispatchSendRow, 0, 1, 2, 123456);
  EXPECT_EQ(t.arg, 123456);
}

TEST(ProfilerEvents, NamesAreUniqueAndStagesBelongToKernels) {
  std::set<std::string> names, kernels;
  for (int i = 0; i < kNumProfilerEvents; ++i) {
    const std::string n = moe_a2a::kProfilerEventNames[i];
    EXPECT_TRUE(names.insert(n).second) << n;
    if (n.find('.') == std::string::npos) kernels.insert(n);
  }
  EXPECT_EQ(kernels, (std::set<std::string>{"dispatch", "combine", "combine_backward"}));
  for (const auto& n : names) EXPECT_TRUE(kernels.count(n.substr(0, n.find('.')))) << n;
}

// 2 blocks x 2 waves, 3 records per track.
struct Buffers {
  static constexpr uint32_t kCap = 3;
  std::vector<ProfilerRecord> records = std::vector<ProfilerRecord>(4 * kCap, ProfilerRecord{});
  std::vector<uint32_t> counts = std::vector<uint32_t>(4, 0);
  void put(int block, int wave, ProfilerEvent e, uint64_t s, uint64_t t, int32_t arg) {
    const size_t track = static_cast<size_t>(block) * 2 + wave;
    const uint32_t n = counts[track]++;
    if (n < kCap) records[track * kCap + n] = make_profiler_record(e, wave, s, t, arg);
  }
};

TEST(ProfilerDecode, KeepsBlockWaveAndArgs) {
  Buffers b;
  b.put(0, 0, ProfilerEvent::kDispatch, 100, 200, -1);
  b.put(1, 1, ProfilerEvent::kDispatchSendRow, 120, 130, 42);
  const auto d = decode_profile(b.records.data(), b.counts.data(), Buffers::kCap, 2, 2);
  ASSERT_EQ(d.events.size(), 2u);
  EXPECT_EQ(d.attempted, 2u);
  EXPECT_EQ(d.dropped, 0u);
  EXPECT_EQ(d.invalid, 0u);
  EXPECT_EQ(d.events[1].block, 1);
  EXPECT_EQ(d.events[1].wave, 1);
  EXPECT_EQ(d.events[1].arg, 42);
  EXPECT_EQ(d.events[1].event, static_cast<int>(ProfilerEvent::kDispatchSendRow));
  EXPECT_EQ(d.events[1].start, 120u);
  EXPECT_EQ(d.events[1].end, 130u);
}

TEST(ProfilerDecode, CountsRecordsPastCapacityAsDropped) {
  Buffers b;
  for (int i = 0; i < 5; ++i) b.put(1, 0, ProfilerEvent::kCombineReduce, 10 + i, 11 + i, i);
  const auto d = decode_profile(b.records.data(), b.counts.data(), Buffers::kCap, 2, 2);
  EXPECT_EQ(d.attempted, 5u);
  EXPECT_EQ(d.dropped, 2u);
  ASSERT_EQ(d.events.size(), 3u);  // the first three, in order
  EXPECT_EQ(d.events[2].arg, 2);
}

TEST(ProfilerDecode, RejectsUnwrittenAndCorruptSlots) {
  Buffers b;
  b.counts[0] = 1;  // reserved, never written (a kernel that did not finish): start == 0
  b.put(0, 1, ProfilerEvent::kDispatch, 50, 40, -1);  // end before start
  b.put(1, 0, ProfilerEvent::kDispatch, 1, 2, -1);
  b.records[2 * Buffers::kCap].event = static_cast<uint16_t>(kNumProfilerEvents);  // unknown event
  b.put(1, 1, ProfilerEvent::kDispatch, 1, 2, -1);
  b.records[3 * Buffers::kCap].wave = 0;  // written into another wave's track
  const auto d = decode_profile(b.records.data(), b.counts.data(), Buffers::kCap, 2, 2);
  EXPECT_EQ(d.invalid, 4u);
  EXPECT_TRUE(d.events.empty());
}

}  // namespace
