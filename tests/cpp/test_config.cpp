// EpConfig (include/moe_a2a/ep/config.h): the one place that computes buffer sizes and
// offsets. Allocator and kernels both trust these numbers, so they are checked exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "moe_a2a/ep/config.h"
#include "moe_a2a/platform/sync.h"

namespace {

using moe_a2a::ConfigField;
using moe_a2a::EpConfig;
using moe_a2a::kBufferAlign;

struct Shape {
  int32_t experts, topk, hidden, max_tokens;
};

// The AMD challenge's benchmark shapes (experts, topk, hidden, max tokens).
const std::vector<Shape> kChallengeShapes = {
    {8, 2, 6144, 16}, {64, 6, 2048, 32}, {128, 4, 2880, 128}, {128, 8, 4096, 256}, {256, 8, 7168, 256},
};
// The challenge's correctness shapes.
const std::vector<Shape> kCorrectnessShapes = {
    {8, 2, 6144, 4},    {64, 6, 2048, 4},    {64, 6, 2048, 8},   {128, 4, 2880, 16},  {128, 4, 2880, 32},
    {128, 8, 4096, 64}, {128, 8, 4096, 128}, {256, 8, 7168, 64}, {256, 8, 7168, 128},
};

EpConfig make(int32_t world, const Shape& s, int32_t rank = 0) {
  EpConfig c;
  c.world = world;
  c.rank = rank;
  c.num_experts = s.experts;
  c.topk = s.topk;
  c.hidden = s.hidden;
  c.max_tokens = s.max_tokens;
  c.expert_capacity = static_cast<int32_t>(c.worst_case_capacity());
  c.elem_bytes = 2;
  c.num_blocks = 132;
  return c;
}

std::string describe(const EpConfig& c) {
  return "world=" + std::to_string(c.world) + " experts=" + std::to_string(c.num_experts) +
         " topk=" + std::to_string(c.topk) + " hidden=" + std::to_string(c.hidden) +
         " max_tokens=" + std::to_string(c.max_tokens);
}

struct Region {
  const char* name;
  size_t offset;
  size_t bytes;  // exact payload size the kernels index into
};

// Regions must start at 0, be aligned, be in the listed order, not overlap, leave no more
// than alignment padding between them, and total must cover the last one, aligned.
void check_regions(const std::vector<Region>& regions, size_t total, const std::string& what) {
  ASSERT_FALSE(regions.empty());
  EXPECT_EQ(regions.front().offset, 0u) << what;
  for (size_t i = 0; i < regions.size(); ++i) {
    const Region& r = regions[i];
    EXPECT_EQ(r.offset % kBufferAlign, 0u) << what << ": " << r.name << " at " << r.offset << " not aligned";
    const size_t end = r.offset + r.bytes;
    const size_t next = i + 1 < regions.size() ? regions[i + 1].offset : total;
    EXPECT_LE(end, next) << what << ": " << r.name << " overlaps what follows it";
    EXPECT_EQ(next, moe_a2a::align_up(end, kBufferAlign))
        << what << ": " << r.name << " is not followed directly (after padding) by the next region";
  }
  EXPECT_EQ(total % kBufferAlign, 0u) << what;
}

std::vector<Region> heap_regions(const EpConfig& c) {
  const moe_a2a::HeapLayout l = c.heap_layout();
  const size_t rows = static_cast<size_t>(c.world) * static_cast<size_t>(c.max_tokens);
  const size_t h = static_cast<size_t>(c.hidden);
  const size_t k = static_cast<size_t>(c.topk);
  const size_t w = static_cast<size_t>(c.world);
  const size_t sig = sizeof(moe_a2a::Signal);
  const size_t groups = static_cast<size_t>(c.max_groups());
  return {
      {"recv_x", l.recv_x, rows * h * 2},
      {"recv_token", l.recv_token, rows * sizeof(int32_t)},
      {"recv_expert", l.recv_expert, rows * k * sizeof(int32_t)},
      {"recv_weight", l.recv_weight, rows * k * sizeof(float)},
      // flagged words: each source's count a local expert, then its token count
      {"recv_count", l.recv_count, w * static_cast<size_t>(c.experts_per_rank() + 1) * sizeof(uint64_t)},
      {"comb_x", l.comb_x, rows * h * 2},
      {"comb_w", l.comb_w, static_cast<size_t>(c.max_tokens) * k * sizeof(uint64_t)},  // flagged words
      // A flagged row: 8 bytes for every 4 of the row, in blocks of 64 vectors of 16 bytes.
      {"comb_flagged", l.comb_flagged,
       w * static_cast<size_t>(std::min(c.max_tokens, moe_a2a::kFlaggedTokens)) * 2 * ((h * 2 + 1023) / 1024 * 1024)},
      {"group_signal", l.group_signal, w * groups * sig},
      {"partial_signal", l.partial_signal, w * static_cast<size_t>(c.max_combine_units()) * sig},
      {"start_signal", l.start_signal, w * sig},
      {"wgrad_signal", l.wgrad_signal, w * groups * sig},
      {"grad_signal", l.grad_signal, w * groups * moe_a2a::kGradSubRanges * sig},
  };
}

std::vector<Region> workspace_regions(const EpConfig& c) {
  const moe_a2a::WorkspaceLayout l = c.workspace_layout();
  return {
      {"block_epoch", l.block_epoch, static_cast<size_t>(c.num_blocks) * sizeof(uint64_t)},
      {"round_error", l.round_error, sizeof(uint64_t)},
      {"timed_out", l.timed_out, sizeof(uint64_t)},
      {"recv_ticket", l.recv_ticket, sizeof(uint64_t)},
      {"pair_totals", l.pair_totals, static_cast<size_t>(c.num_experts) * sizeof(uint32_t)},
      {"reserved_blocks", l.reserved_blocks, sizeof(uint32_t)},
  };
}

void check_layouts(const EpConfig& c) {
  SCOPED_TRACE(describe(c));
  check_regions(heap_regions(c), c.heap_layout().total, "heap");
  check_regions(workspace_regions(c), c.workspace_layout().total, "workspace");
}

TEST(EpConfig, DerivedQuantities) {
  const EpConfig c = make(8, {256, 8, 7168, 256});
  EXPECT_EQ(c.experts_per_rank(), 32);
  EXPECT_EQ(c.owner_rank(0), 0);
  EXPECT_EQ(c.owner_rank(31), 0);
  EXPECT_EQ(c.owner_rank(32), 1);
  EXPECT_EQ(c.owner_rank(255), 7);
  EXPECT_EQ(c.row_bytes(), 7168u * 2);
  EXPECT_EQ(c.rows_per_rank(), 8u * 256);
  EXPECT_EQ(c.worst_case_capacity(), 8u * 256);
  EXPECT_EQ(c.expert_x_bytes(), 32u * (8u * 256) * 7168u * 2);
}

TEST(EpConfig, RecvXSizeIsExact) {
  const EpConfig c = make(8, {128, 8, 4096, 256});
  const moe_a2a::HeapLayout l = c.heap_layout();
  EXPECT_EQ(l.recv_x, 0u);
  // recv_x = world * max_tokens * hidden * 2 bytes, already a multiple of 256 here.
  EXPECT_EQ(l.recv_token - l.recv_x, 8u * 256 * 4096 * 2);
  EXPECT_EQ(l.recv_expert - l.recv_token, 8u * 256 * 4);
  EXPECT_EQ(l.recv_weight - l.recv_expert, 8u * 256 * 8 * 4);
  EXPECT_EQ(l.recv_count - l.recv_weight, 8u * 256 * 8 * 4);
  EXPECT_EQ(l.comb_x - l.recv_count, 5u * kBufferAlign);  // 8 x (16 counts + a token count) x 8 bytes = 1088, padded
  EXPECT_EQ(l.comb_w - l.comb_x, 8u * 256 * 4096 * 2);
  EXPECT_EQ(l.comb_flagged - l.comb_w, 256u * 8 * 8);                  // a flagged word a weight gradient
  EXPECT_EQ(l.group_signal - l.comb_flagged, 8u * 32 * 4096 * 2 * 2);  // 32 tokens' rows, 8 bytes per 4
  EXPECT_EQ(c.max_groups(), 132);                                      // min(max_tokens, 132 blocks x 1 group)
  EXPECT_EQ(l.partial_signal - l.group_signal, 8u * 132 * 8);
  EXPECT_EQ(l.start_signal - l.partial_signal, 8u * 132 * 8);
  EXPECT_EQ(l.wgrad_signal - l.start_signal, kBufferAlign);                    // 8 start signals, padded
  EXPECT_EQ(l.grad_signal - l.wgrad_signal, 8u * 132 * 8);                     // a wgrad signal per source and group
  EXPECT_EQ(l.total - l.grad_signal, 8u * 132 * moe_a2a::kGradSubRanges * 8);  // kGradSubRanges grad signals too
}

TEST(EpConfig, ChallengeShapeLayouts) {
  for (int32_t world : {2, 4, 8}) {
    for (const Shape& s : kChallengeShapes) check_layouts(make(world, s));
    for (const Shape& s : kCorrectnessShapes) check_layouts(make(world, s));
  }
}

TEST(EpConfig, OddSizesArePadded) {
  // Sizes that are not multiples of the alignment: one token, topk 3, hidden 8.
  for (int32_t world : {2, 3, 5, 7, 8}) {
    check_layouts(make(world, {world * 3, 3, 8, 1}));
    check_layouts(make(world, {world, 1, 2888, 7}));
  }
}

TEST(EpConfig, LayoutIsTheSameOnEveryRank) {
  // The heap is symmetric: a peer computes offsets into *our* heap with its own config.
  for (const Shape& s : kChallengeShapes) {
    const EpConfig a = make(8, s, 0);
    for (int32_t rank = 1; rank < 8; ++rank) {
      const EpConfig b = make(8, s, rank);
      const auto ra = heap_regions(a), rb = heap_regions(b);
      for (size_t i = 0; i < ra.size(); ++i) EXPECT_EQ(ra[i].offset, rb[i].offset) << ra[i].name;
      EXPECT_EQ(a.heap_layout().total, b.heap_layout().total);
      EXPECT_EQ(a.workspace_layout().total, b.workspace_layout().total);
    }
  }
}

TEST(EpConfig, NoInt32OverflowAtTheLargestConfig) {
  // 8 ranks x 4096 tokens x 16384 hidden x 2 bytes = 2^30 per token buffer; the heap holds two
  // of them, so its size is past INT32_MAX. expert_x at the worst-case capacity is 2^36.
  EpConfig c = make(8, {512, 16, 16384, 4096});
  ASSERT_EQ(moe_a2a::validate(c), "");
  check_layouts(c);

  const size_t rows = 8ull * 4096;
  const size_t token_buf = rows * 16384 * 2;
  ASSERT_EQ(token_buf, size_t{1} << 30);
  const moe_a2a::HeapLayout l = c.heap_layout();
  EXPECT_EQ(l.recv_token, token_buf);
  const size_t counts = 17 * kBufferAlign, weight_grads = 4096 * 16 * 8;  // flagged words (counts: 8 x 65 x 8, padded)
  EXPECT_EQ(l.comb_x, token_buf + rows * 4 + rows * 16 * 4 * 2 + counts);
  EXPECT_EQ(l.comb_w, l.comb_x + token_buf);
  const size_t flagged = 8u * 32 * 16384 * 2 * 2;  // 32 tokens (kFlaggedTokens), 8 bytes per 4
  EXPECT_EQ(l.comb_flagged, l.comb_w + weight_grads);
  EXPECT_EQ(l.group_signal, l.comb_flagged + flagged);
  EXPECT_GT(l.total, static_cast<size_t>(std::numeric_limits<int32_t>::max()));
  // 132 blocks x 1 group, twice over at 4096 tokens (kDoubleGroupsTokens), 8 sources, 8 bytes each
  const size_t group_signals = 8u * 264 * 8;
  // group, partial and wgrad signals, and the backward of combine's grad signals (kGradSubRanges a group)
  const size_t signals = (3 + moe_a2a::kGradSubRanges) * group_signals;
  EXPECT_EQ(l.total,
            2 * token_buf + rows * 4 + rows * 16 * 4 * 2 + counts + weight_grads + flagged + signals + kBufferAlign);

  // Padded dispatch output: 64 local experts x 32768 rows x 32 KiB.
  EXPECT_EQ(c.expert_x_bytes(), uint64_t{64} * 32768 * 32768);
  EXPECT_EQ(c.expert_x_bytes(), uint64_t{1} << 36);
  EXPECT_GT(c.expert_x_bytes(), uint64_t{1} << 32);
}

TEST(EpConfig, ValidateAcceptsChallengeShapes) {
  for (int32_t world : {2, 8}) {
    for (const Shape& s : kChallengeShapes) {
      for (int32_t rank : {0, world - 1}) {
        const EpConfig c = make(world, s, rank);
        EXPECT_EQ(moe_a2a::validate(c), "") << describe(c);
        EpConfig small = c;
        small.expert_capacity = 1;
        EXPECT_EQ(moe_a2a::validate(small), "") << describe(c);
      }
    }
    for (const Shape& s : kCorrectnessShapes) EXPECT_EQ(moe_a2a::validate(make(world, s)), "");
  }
}

// Each bad config must be rejected with a message that names what is wrong.
void expect_rejected(const EpConfig& c, const std::string& field) {
  const std::string msg = moe_a2a::validate(c);
  EXPECT_FALSE(msg.empty()) << describe(c) << " should be rejected for " << field;
  EXPECT_NE(msg.find(field), std::string::npos) << "message '" << msg << "' does not name " << field;
}

// Calls field f "<f>", a name of the caller's choosing (the binding's are the Python arguments).
const char* numbered(ConfigField f) {
  static const char* const kNames[] = {"<0>", "<1>", "<2>", "<3>", "<4>",  "<5>",
                                       "<6>", "<7>", "<8>", "<9>", "<10>", "<11>"};
  static_assert(std::size(kNames) == static_cast<size_t>(ConfigField::kCount), "a name for every field");
  return kNames[static_cast<int>(f)];
}

// ... and when what is wrong is a field, it is named by the caller's FieldName, never by hand.
void expect_rejected(const EpConfig& c, ConfigField field) {
  expect_rejected(c, moe_a2a::cxx_field_name(field));
  const std::string msg = moe_a2a::validate(c, numbered);
  EXPECT_NE(msg.find(numbered(field)), std::string::npos)
      << "message '" << msg << "' does not name " << numbered(field);
  EXPECT_EQ(msg.find(moe_a2a::cxx_field_name(field)), std::string::npos) << "message '" << msg << "' names it by hand";
}

TEST(EpConfig, ValidateRejectsBadConfigs) {
  const EpConfig good = make(8, {256, 8, 7168, 256});
  ASSERT_EQ(moe_a2a::validate(good), "");
  EpConfig c;

  for (int32_t w : {0, 1, 9, 16, -2}) {
    c = good;
    c.world = w;
    expect_rejected(c, "world");
  }
  for (int32_t r : {-1, 8, 100}) {
    c = good;
    c.rank = r;
    expect_rejected(c, "rank");
  }
  for (int32_t e : {0, 4, 7, 12, 513, 1024}) {  // fewer than world, not divisible, too many
    c = good;
    c.num_experts = e;
    expect_rejected(c, ConfigField::kNumExperts);
  }
  for (int32_t k : {0, -1, 17}) {
    c = good;
    c.topk = k;
    expect_rejected(c, ConfigField::kTopk);
  }
  c = make(2, {4, 2, 2048, 16});
  c.topk = 5;  // more than num_experts
  expect_rejected(c, ConfigField::kTopk);
  for (int32_t h : {0, 4, 2884, 16392, 32768, -8}) {
    c = good;
    c.hidden = h;
    expect_rejected(c, ConfigField::kHidden);
  }
  for (int32_t t : {0, -1, 4097}) {
    c = good;
    c.max_tokens = t;
    expect_rejected(c, ConfigField::kMaxTokens);
  }
  for (int32_t cap : {0, -1, 8 * 256 * 8 + 1}) {  // padded: at most world * max_tokens * topk
    c = good;
    c.expert_capacity = cap;
    expect_rejected(c, ConfigField::kPaddedCapacity);
  }
  for (int32_t b : {1, 3, 8, 0}) {
    c = good;
    c.elem_bytes = b;
    expect_rejected(c, "bf16");
  }
  c = good;
  c.elem_bytes = 4;  // fp32 tokens
  EXPECT_EQ(moe_a2a::validate(c), "");
  c = good;
  c.layout = static_cast<moe_a2a::Layout>(2);
  expect_rejected(c, ConfigField::kLayout);
  c = good;
  c.layout = moe_a2a::Layout::kPacked;
  c.expert_capacity = 8 * 256 * 8 + 1;  // past the packed maximum (topk rows per token)
  expect_rejected(c, ConfigField::kPackedCapacity);
  c = good;
  c.expert_capacity = static_cast<int32_t>(c.worst_case_capacity()) * c.topk;  // duplicate ids: topk rows a token
  EXPECT_EQ(moe_a2a::validate(c), "");
  c.expert_capacity += 1;
  expect_rejected(c, ConfigField::kPaddedCapacity);
  // Blocks that only send: auto, 0 (every block does both) or up to num_blocks - 1 (one receiver left).
  for (int32_t senders : {-2, good.num_blocks, good.num_blocks + 5}) {  // -1 is kAutoSenders
    c = good;
    c.dispatch_senders = senders;
    expect_rejected(c, ConfigField::kDispatchSenders);
    c = good;
    c.combine_senders = senders;
    expect_rejected(c, ConfigField::kCombineSenders);
  }
  c = good;
  c.dispatch_senders = good.num_blocks - 1;
  c.combine_senders = 1;
  EXPECT_EQ(moe_a2a::validate(c), "");
}

TEST(EpConfig, PackedLayout) {
  EpConfig c = make(8, {256, 8, 7168, 256});
  c.layout = moe_a2a::Layout::kPacked;
  // Every token of every rank can bring min(topk, experts per rank) rows to this rank.
  EXPECT_EQ(c.worst_case_capacity(), 8u * 256 * 8);
  c.expert_capacity = 5000;
  EXPECT_EQ(c.output_rows(), 5000u);
  EXPECT_EQ(c.expert_x_bytes(), 5000u * 7168 * 2);
  EXPECT_EQ(moe_a2a::validate(c), "");
  // Fewer local experts than topk: at most experts_per_rank rows per token.
  EpConfig few = make(8, {16, 8, 1024, 64});
  few.layout = moe_a2a::Layout::kPacked;
  EXPECT_EQ(few.worst_case_capacity(), 8u * 64 * 2);
  // Padded rows are per expert.
  const EpConfig padded = make(8, {256, 8, 7168, 256});
  EXPECT_EQ(padded.output_rows(), 32u * padded.worst_case_capacity());
  // Default capacity: the packed worst case when it fits the budget, one row per budget row otherwise.
  EXPECT_EQ(moe_a2a::default_expert_capacity(c, SIZE_MAX), static_cast<int32_t>(c.worst_case_capacity()));
  EXPECT_EQ(moe_a2a::default_expert_capacity(c, 100 * c.row_bytes() + 1), 100);
  // The heap does not depend on the layout (only the dispatch output does).
  EXPECT_EQ(c.heap_layout().total, padded.heap_layout().total);
}

TEST(EpConfig, ValidateLimitsAreInclusive) {
  EpConfig c = make(8, {512, 16, 16384, 4096});
  EXPECT_EQ(moe_a2a::validate(c), "");
  c = make(2, {2, 1, 8, 1});
  EXPECT_EQ(moe_a2a::validate(c), "");
  c.expert_capacity = 2;  // == world * max_tokens
  EXPECT_EQ(moe_a2a::validate(c), "");
}

TEST(EpConfig, DefaultExpertCapacity) {
  const EpConfig c = make(8, {256, 8, 7168, 256});
  const size_t per_row = 32u * 7168 * 2;  // one row in every local expert
  const size_t worst = c.worst_case_capacity();
  // Enough budget: the worst case (every token of every rank picked the expert).
  EXPECT_EQ(moe_a2a::default_expert_capacity(c, worst * per_row), static_cast<int32_t>(worst));
  EXPECT_EQ(moe_a2a::default_expert_capacity(c, SIZE_MAX), static_cast<int32_t>(worst));
  // Otherwise as many rows as fit, rounded down.
  EXPECT_EQ(moe_a2a::default_expert_capacity(c, worst * per_row - 1), static_cast<int32_t>(worst - 1));
  EXPECT_EQ(moe_a2a::default_expert_capacity(c, 10 * per_row + per_row - 1), 10);
  // Never below one row.
  EXPECT_EQ(moe_a2a::default_expert_capacity(c, per_row - 1), 1);
  EXPECT_EQ(moe_a2a::default_expert_capacity(c, 0), 1);
  // The result always validates, and its output fits the budget when at least one row fits.
  for (size_t budget : {per_row, 3 * per_row + 7, size_t{1} << 30, size_t{8} << 30}) {
    EpConfig d = c;
    d.expert_capacity = moe_a2a::default_expert_capacity(c, budget);
    EXPECT_EQ(moe_a2a::validate(d), "") << budget;
    EXPECT_LE(d.expert_x_bytes(), budget);
  }
}

TEST(EpConfig, DefaultExpertCapacityNoOverflowAtLargestConfig) {
  const EpConfig c = make(8, {512, 16, 16384, 4096});
  EXPECT_EQ(moe_a2a::default_expert_capacity(c, SIZE_MAX), 32768);
  EXPECT_EQ(moe_a2a::default_expert_capacity(c, size_t{1} << 36), 32768);
  EXPECT_EQ(moe_a2a::default_expert_capacity(c, size_t{1} << 35), 16384);
}

TEST(EpConfig, AlignUp) {
  EXPECT_EQ(moe_a2a::align_up(0, 256), 0u);
  EXPECT_EQ(moe_a2a::align_up(1, 256), 256u);
  EXPECT_EQ(moe_a2a::align_up(256, 256), 256u);
  EXPECT_EQ(moe_a2a::align_up(257, 256), 512u);
  EXPECT_EQ(moe_a2a::align_up((size_t{1} << 33) + 1, 256), (size_t{1} << 33) + 256);
}

TEST(EpConfig, TokenGroupsCoverEveryTokenOnce) {
  for (int32_t blocks : {1, 3, 132, 304}) {
    EpConfig c = make(2, {16, 2, 256, 4096});
    c.num_blocks = blocks;
    c.groups_per_block = 4;
    if (moe_a2a::validate(c) != "") continue;  // too few blocks for 4096 tokens
    for (int32_t tokens : {0, 1, 2, 7, 131, 132, 133, 528, 1000, 2048, 2049, 4096}) {
      const int32_t n = c.num_groups(tokens);
      const int32_t base = std::min(blocks * 4, c.max_tokens);
      const int32_t doubled = tokens > moe_a2a::kDoubleGroupsTokens * base ? 2 : 1;
      EXPECT_EQ(n, std::min(tokens, doubled * base));
      EXPECT_LE(n, c.max_groups());
      int32_t next = 0;
      for (int32_t g = 0; g < n; ++g) {
        const moe_a2a::TokenRange r = c.token_group(tokens, g);
        EXPECT_EQ(r.begin, next) << tokens << " tokens, group " << g;
        EXPECT_GE(r.end - r.begin, 1);
        EXPECT_LE(r.end - r.begin, c.max_group_tokens());
        next = r.end;
      }
      EXPECT_EQ(next, tokens);
    }
  }
}

// Where one group a block would hold more than kDoubleGroupsTokens tokens, a rank's tokens go in
// twice as many groups (session 31); the signals' layout and the largest group follow.
TEST(EpConfig, GroupsDoubleWhereTheyWouldBeLarge) {
  EpConfig c = make(2, {256, 8, 7168, 4096});
  c.num_blocks = 132;
  ASSERT_EQ(moe_a2a::validate(c), "");
  EXPECT_EQ(c.base_groups(), 132);
  EXPECT_EQ(c.num_groups(100), 100);  // a token a group
  EXPECT_EQ(c.num_groups(1000), 132);
  EXPECT_EQ(c.num_groups(16 * 132), 132);  // 2112 tokens: 16 a group
  EXPECT_EQ(c.num_groups(16 * 132 + 1), 264);
  EXPECT_EQ(c.num_groups(4096), 264);
  EXPECT_EQ(c.max_groups(), 264);
  EXPECT_EQ(c.max_group_tokens(), 16);  // 2112 / 132, and 4096 / 264 rounded up
  c.max_tokens = 2048;
  EXPECT_EQ(c.max_groups(), 132);
  EXPECT_EQ(c.max_group_tokens(), 16);
  c.max_tokens = 4096;
  c.num_blocks = 304;  // an MI300X's compute units: at most 13.5 tokens a group, never doubled
  EXPECT_EQ(c.num_groups(4096), 304);
  EXPECT_EQ(c.max_groups(), 304);
  for (int32_t blocks : {1, 8, 132, 304, 1024}) {  // every count: T groups of a token, then base, then twice base
    c.num_blocks = blocks;
    const int32_t base = std::min(blocks, c.max_tokens);
    int32_t largest = 0;
    for (int32_t tokens = 0; tokens <= c.max_tokens; ++tokens) {
      const int32_t expected = tokens <= base                                  ? tokens
                               : tokens <= moe_a2a::kDoubleGroupsTokens * base ? base
                                                                               : std::min(tokens, 2 * base);
      ASSERT_EQ(c.num_groups(tokens), expected) << blocks << " blocks, " << tokens << " tokens";
      if (tokens > 0) largest = std::max(largest, (tokens + expected - 1) / expected);
    }
    EXPECT_EQ(c.max_groups(), c.num_groups(c.max_tokens));
    EXPECT_EQ(c.max_group_tokens(), largest) << blocks << " blocks";
  }
  c.num_blocks = 8;  // doubled from 129 tokens: 4096 in 16 groups of 256
  ASSERT_EQ(moe_a2a::validate(c), "");
  EXPECT_EQ(c.max_group_tokens(), 256);
  EXPECT_EQ(c.num_groups(128), 8);
  EXPECT_EQ(c.num_groups(300), 16);
}

// The backward of combine's sub-ranges: more than one only toward a peer with at most half the
// tokens, and only where every group has kGradSubRanges x kGradSubRangeTokens tokens; each group's
// sub-ranges cover its tokens once, in order, each with kGradSubRangeTokens or more.
TEST(EpConfig, GradSubRangesCoverEveryTokenOfAGroupOnce) {
  EpConfig c = make(2, {256, 8, 7168, 4096});
  c.num_blocks = 132;
  ASSERT_EQ(moe_a2a::validate(c), "");
  const int32_t large = moe_a2a::kGradSubRanges * moe_a2a::kGradSubRangeTokens * c.base_groups();
  EXPECT_EQ(c.grad_subranges(0, 0), 1);
  EXPECT_EQ(c.grad_subranges(128, 0), 1);  // groups of one token
  EXPECT_EQ(c.grad_subranges(large - 1, 0), 1);
  EXPECT_EQ(c.grad_subranges(large, 0), moe_a2a::kGradSubRanges);
  // Doubled groups hold more than 8 tokens too: 2113 tokens in 264 groups of 8-9.
  EXPECT_EQ(c.grad_subranges(16 * 132 + 1, 0), moe_a2a::kGradSubRanges);
  EXPECT_EQ(c.grad_subranges(2048, 1024), moe_a2a::kGradSubRanges);
  EXPECT_EQ(c.grad_subranges(2048, 1025), 1);  // a peer with more than half: its own rows fill the link's time
  EXPECT_EQ(c.grad_subranges(2048, 2048), 1);
  for (int32_t tokens : {large, 2048, 3000, 4096}) {
    const int32_t parts = c.grad_subranges(tokens, 0);
    ASSERT_EQ(parts, moe_a2a::kGradSubRanges);
    for (int32_t g = 0; g < c.num_groups(tokens); ++g) {
      const moe_a2a::TokenRange group = c.token_group(tokens, g);
      int32_t next = group.begin;
      for (int32_t k = 0; k < parts; ++k) {
        const moe_a2a::TokenRange r = EpConfig::grad_subrange(group, k);
        EXPECT_EQ(r.begin, next) << tokens << " tokens, group " << g << ", sub-range " << k;
        EXPECT_GE(r.end - r.begin, moe_a2a::kGradSubRangeTokens);
        next = r.end;
      }
      EXPECT_EQ(next, group.end);
    }
  }
}

// The launcher's pick of the backward of combine's instance: the one with the sub-ranges' code only
// in an engine where some count has groups large enough, decided from the config alone (every rank
// the same), and exactly where grad_subranges can say more than one.
TEST(EpConfig, GradSubRangesPossibleExactlyWhereACountSplits) {
  for (int32_t max_tokens : {24, 128, 512, 1055, 1056, 2048, 4096}) {
    EpConfig c = make(2, {256, 8, 7168, max_tokens});
    c.num_blocks = 132;
    ASSERT_EQ(moe_a2a::validate(c), "");
    bool splits = false;
    for (int32_t tokens = 0; tokens <= max_tokens; ++tokens) splits = splits || c.grad_subranges(tokens, 0) > 1;
    EXPECT_EQ(c.grad_subranges_possible(), splits) << "max_tokens " << max_tokens;
    EXPECT_EQ(c.grad_subranges_possible(), max_tokens >= 1056) << "max_tokens " << max_tokens;  // 8 x 132 groups
  }
  EpConfig few_blocks = make(2, {16, 4, 2048, 24});  // test_autograd's grids of 2 blocks: 2 groups of 12 tokens
  few_blocks.num_blocks = 2;
  ASSERT_EQ(moe_a2a::validate(few_blocks), "");
  EXPECT_TRUE(few_blocks.grad_subranges_possible());
  EXPECT_EQ(few_blocks.grad_subranges(24, 6), moe_a2a::kGradSubRanges);
}

// A dispatched pair's place word keeps its local expert and its rank at their extremes, and is
// never the "no local expert" value (the receiver tells them apart by sign).
TEST(PlaceWord, KeepsLocalExpertAndRank) {
  const int32_t max_rank = moe_a2a::kMaxTokensPerRank * moe_a2a::kMaxTopk - 1;
  for (int32_t expert : {0, 1, 127, moe_a2a::kMaxExperts / 2 - 1}) {
    for (int32_t rank : {0, 1, 255, 256, 4095, max_rank}) {
      const int32_t w = moe_a2a::place_word(expert, rank);
      EXPECT_GE(w, 0) << expert << ", " << rank;
      EXPECT_EQ(moe_a2a::place_expert(w), expert) << expert << ", " << rank;
      EXPECT_EQ(moe_a2a::place_rank(w), rank) << expert << ", " << rank;
    }
  }
  EXPECT_LT(moe_a2a::kNoLocalExpert, 0);
}

// Dispatch's receive items: groups split over the receiving blocks only where each part gets a
// block of its own (so the parts of every group run at once), and never finer than a chunk.
TEST(EpConfig, ReceivePartsGiveEachPartABlock) {
  for (int32_t blocks : {1, 2, 7, 58, 130, 304}) {
    for (int32_t groups : {0, 1, 2, 3, 29, 65, 132}) {
      for (int32_t chunks : {1, 3, 7, 14}) {
        const int32_t parts = moe_a2a::parts_per_group(groups, blocks, chunks);
        const std::string at = std::to_string(groups) + " groups, " + std::to_string(blocks) + " blocks, " +
                               std::to_string(chunks) + " chunks";
        EXPECT_GE(parts, 1) << at;
        EXPECT_LE(parts, chunks) << at;
        if (parts > 1) {
          EXPECT_LE(groups * parts, blocks) << at;
        }
        if (groups > 0 && 2 * groups <= blocks) {
          EXPECT_EQ(parts, std::min(chunks, blocks / groups)) << at;
        }
      }
    }
  }
}

// Combine units: every (token, chunk) of a rank's tokens is in exactly one unit, units fit the
// partial signals, and a group is split only where there are blocks to spare.
TEST(EpConfig, CombineUnitsCoverEveryChunkOnce) {
  for (int32_t blocks : {1, 2, 3, 8, 60, 132, 304}) {
    EpConfig c = make(2, {16, 2, 256, 1024});
    c.num_blocks = blocks;
    c.groups_per_block = 8;
    if (moe_a2a::validate(c) != "") continue;
    for (int32_t chunks : {1, 2, 3, 7, 14}) {
      for (int32_t tokens : {0, 1, 2, 3, 5, 7, 30, 31, 66, 67, 151, 1024}) {
        const int32_t parts = c.combine_parts(tokens, chunks);
        const int32_t groups = c.num_groups(tokens);
        const int32_t units = c.combine_units(tokens, chunks);
        const std::string at = std::to_string(blocks) + " blocks, " + std::to_string(chunks) + " chunks, " +
                               std::to_string(tokens) + " tokens";
        EXPECT_GE(parts, 1) << at;
        EXPECT_LE(parts, chunks) << at;
        EXPECT_EQ(units, groups * parts) << at;
        EXPECT_LE(units, c.max_combine_units()) << at;
        if (parts > 1) {
          EXPECT_LE(units, blocks) << at;
        }
        if (groups > 0 && 2 * groups <= blocks) {
          EXPECT_EQ(parts, std::min(chunks, blocks / groups)) << at;
        }
        std::vector<int32_t> seen(static_cast<size_t>(groups) * chunks, 0);
        for (int32_t u = 0; u < units; ++u) {
          const moe_a2a::GroupPart unit = moe_a2a::group_part(u, parts, chunks);
          ASSERT_GE(unit.group, 0) << at;
          ASSERT_LT(unit.group, groups) << at;
          EXPECT_GE(unit.chunk_count, 1) << at << ", unit " << u;
          for (int32_t k = unit.chunk_first; k < unit.chunk_first + unit.chunk_count; ++k) {
            ASSERT_GE(k, 0) << at;
            ASSERT_LT(k, chunks) << at;
            ++seen[static_cast<size_t>(unit.group) * chunks + k];
          }
        }
        for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], 1) << at << ", (group, chunk) " << i;
      }
    }
  }
}

TEST(EpConfig, ValidateNeedsEnoughBlocksForTheGroups) {
  EpConfig c = make(2, {16, 2, 256, 4096});
  c.groups_per_block = 4;
  c.num_blocks = 1;  // 4096 tokens in 2 x 4 groups of 512: more than one thread per token
  expect_rejected(c, ConfigField::kNumBlocks);
  EXPECT_NE(moe_a2a::validate(c).find("use at least 2 blocks"), std::string::npos) << moe_a2a::validate(c);
  c.num_blocks = 2;  // 16 groups of 256
  EXPECT_EQ(moe_a2a::validate(c), "");
  c.max_tokens = 2048;
  c.num_blocks = 1;  // 8 groups of 256
  EXPECT_EQ(moe_a2a::validate(c), "");
  c.max_tokens = 4096;
  c.num_blocks = 0;
  EXPECT_NE(moe_a2a::validate(c), "");
}

TEST(EpConfig, SignalWordsCompareInSerialOrderAcrossEveryWrap) {
  // A waiter for round e wants reached(word, signal_word(e, 0)): the word of round e or e + 1
  // has reached it whatever its payload; the word of round e - 1 has not, even with the
  // largest payload. Also across 2^32, across the wrap of the 40 epoch bits a word holds
  // (2^40), and across 2^64.
  using moe_a2a::reached;
  using moe_a2a::signal_word;
  const uint32_t full = moe_a2a::kFlagErrorBit | moe_a2a::kFlagCountMask;
  const uint64_t starts[] = {0u,
                             1u,
                             0xfffffffeull,
                             0xffffffffull,
                             0x100000000ull,
                             (uint64_t{1} << 40) - 1,
                             uint64_t{1} << 40,
                             ~uint64_t{0} - 1,
                             ~uint64_t{0}};
  for (uint64_t e : starts) {
    const uint64_t want = signal_word(e, 0);
    for (uint32_t payload : {0u, 1u, full}) {
      EXPECT_TRUE(reached(signal_word(e, payload), want)) << e;
      EXPECT_TRUE(reached(signal_word(e + 1, payload), want)) << e;
      EXPECT_FALSE(reached(signal_word(e - 1, payload), want)) << e;
      EXPECT_EQ(moe_a2a::signal_payload(signal_word(e, payload)), payload);
    }
    EXPECT_EQ(moe_a2a::signal_epoch(signal_word(e, full)), e & ((uint64_t{1} << 40) - 1));
  }
  EXPECT_EQ(moe_a2a::kFlagErrorBit & moe_a2a::kFlagCountMask, 0u);
  EXPECT_EQ(moe_a2a::kFlagErrorBit | moe_a2a::kFlagCountMask, (1u << moe_a2a::kSignalPayloadBits) - 1u);
}

TEST(EpConfig, ExpertAlignmentPadsThePackedSegments) {
  moe_a2a::EpConfig c;
  c.world = 2;
  c.num_experts = 16;
  c.topk = 4;
  c.hidden = 512;
  c.max_tokens = 40;
  c.layout = moe_a2a::Layout::kPacked;
  c.num_blocks = 8;
  const size_t plain = c.worst_case_capacity();
  c.expert_alignment = 16;
  EXPECT_EQ(c.worst_case_capacity(), plain + 8 * 15);  // 8 local experts, up to 15 padding rows each
  EXPECT_EQ(c.aligned_rows(0), 0);
  EXPECT_EQ(c.aligned_rows(1), 16);
  EXPECT_EQ(c.aligned_rows(16), 16);
  EXPECT_EQ(c.aligned_rows(17), 32);
  c.expert_capacity = static_cast<int32_t>(c.worst_case_capacity());
  EXPECT_EQ(moe_a2a::validate(c), "");
  c.expert_alignment = 0;
  expect_rejected(c, ConfigField::kExpertAlignment);
  c.expert_alignment = 16;
  c.layout = moe_a2a::Layout::kPadded;
  c.expert_capacity = 8;
  EXPECT_NE(moe_a2a::validate(c).find("expert_alignment is for"), std::string::npos);
}

// The helpers are constexpr: usable in static_asserts and from device code alike.
static_assert(moe_a2a::reached(0, ~uint64_t{0}), "epoch 0 comes after 2^64 - 1");
static_assert(moe_a2a::align_up(300, moe_a2a::kBufferAlign) == 512, "align_up");
static_assert((moe_a2a::kBufferAlign & (moe_a2a::kBufferAlign - 1)) == 0, "kBufferAlign is a power of two");

}  // namespace

namespace {

// fp8 rows: the wire row (fp8 bytes, then 16-byte padded scales) fits the token row's slot for
// every challenge shape and both token sizes, and expert_x shrinks to one byte per channel.
TEST(EpConfig, Fp8RowsFitTheirSlots) {
  for (const Shape& s : kChallengeShapes) {
    for (int32_t elem : {2, 4}) {
      EpConfig c = make(2, s);
      c.elem_bytes = elem;
      c.fp8 = moe_a2a::Fp8Format::kE4M3Fn;
      EXPECT_EQ(moe_a2a::validate(c), "") << describe(c);
      EXPECT_EQ(c.scale_blocks(), (s.hidden + 127) / 128);
      EXPECT_EQ(c.out_row_bytes(), static_cast<size_t>(s.hidden));
      EXPECT_EQ(c.wire_row_bytes() % 16, 0u);
      EXPECT_GE(c.wire_row_bytes(), static_cast<size_t>(s.hidden) + 4u * c.scale_blocks());
      EXPECT_LE(c.wire_row_bytes(), c.row_bytes());
      EXPECT_EQ(c.expert_x_bytes(), c.output_rows() * (s.hidden + 4u * c.scale_blocks()));
    }
  }
  EpConfig c = make(2, {128, 4, 2880, 16});
  c.fp8 = moe_a2a::Fp8Format::kE4M3Fnuz;
  EXPECT_EQ(c.scale_blocks(), 23);             // 22 full blocks and one of 64 channels
  EXPECT_EQ(c.wire_row_bytes(), 2880u + 96u);  // 23 scales = 92 bytes, padded to 96
}

TEST(EpConfig, Fp8ValidateNamesTheProblem) {
  EpConfig c = make(2, {8, 2, 6152, 16});  // a multiple of 8, not of 16
  EXPECT_EQ(moe_a2a::validate(c), "");
  c.fp8 = moe_a2a::Fp8Format::kE4M3Fn;
  EXPECT_NE(moe_a2a::validate(c).find("multiple of 16"), std::string::npos) << moe_a2a::validate(c);
  EpConfig p = make(2, kChallengeShapes[0]);
  p.fp8_pow2_scales = 1;
  EXPECT_NE(moe_a2a::validate(p).find("power-of-two scales are for fp8"), std::string::npos);
  p.fp8 = static_cast<moe_a2a::Fp8Format>(7);
  EXPECT_NE(moe_a2a::validate(p).find("fp8 format"), std::string::npos);
}

// send_sms="auto": a split where each half has a block for every item it takes, and dispatch's
// halves at large batches.
TEST(EpConfig, AutomaticSendersSplitWhereEveryItemHasABlockOrTheBatchIsLarge) {
  EpConfig c = make(2, {256, 8, 7168, 4096});  // 132 blocks, 7 chunks a row on NVIDIA
  ASSERT_EQ(c.dispatch_senders, moe_a2a::kAutoSenders);
  ASSERT_EQ(c.combine_senders, moe_a2a::kAutoSenders);
  EXPECT_EQ(c.dispatch_sender_blocks(0), 1);    // the counting block alone
  EXPECT_EQ(c.dispatch_sender_blocks(1), 2);    // one group and the counting block
  EXPECT_EQ(c.dispatch_sender_blocks(65), 66);  // 66 senders, 66 receivers
  EXPECT_EQ(c.dispatch_sender_blocks(66), 0);
  EXPECT_EQ(c.dispatch_sender_blocks(moe_a2a::kSplitDispatchTokens - 1), 0);
  EXPECT_EQ(c.dispatch_sender_blocks(moe_a2a::kSplitDispatchTokens), 66);  // large batches: halves
  EXPECT_EQ(c.dispatch_sender_blocks(4096), 66);
  EXPECT_EQ(c.dispatch_sender_blocks(4096, /*quantizes=*/true), 0);  // fp8 from the token type: every block both
  EXPECT_EQ(c.dispatch_sender_blocks(1, /*quantizes=*/true), 2);     // a few tokens split as before
  // combine: (this rank's units, the most units of any source)
  const auto units = [&c](int tokens) { return c.combine_units(tokens, 7); };
  EXPECT_EQ(units(1), 7);   // one token: a unit per chunk
  EXPECT_EQ(units(9), 63);  // 9 groups of 7 parts
  EXPECT_EQ(units(16), 112);
  EXPECT_EQ(c.combine_sender_blocks(0, 0), 0);  // nothing to send
  EXPECT_EQ(c.combine_sender_blocks(units(1), units(1)), 7);
  EXPECT_EQ(c.combine_sender_blocks(units(9), units(9)), 63);
  EXPECT_EQ(c.combine_sender_blocks(units(10), units(10)), 0);  // 70 units each: more than half the blocks
  EXPECT_EQ(c.combine_sender_blocks(units(4096), units(4096)), 0);
  // Unequal batches: the senders answer the peer's units, not this rank's own number of them. A
  // rank with 1 token whose peer has 16 sends with 112 blocks (it had 7 for the peer's 112 units).
  EXPECT_EQ(c.combine_sender_blocks(units(1), units(16)), 112);
  EXPECT_EQ(c.combine_sender_blocks(units(16), units(16)), 0);   // 112 + 112 > 132
  EXPECT_EQ(c.combine_sender_blocks(units(0), units(16)), 112);  // no tokens here: all may send
  EXPECT_EQ(c.combine_sender_blocks(units(4), units(16)), 0);    // 28 + 112 > 132: every block both
  c.dispatch_senders = 5;
  c.combine_senders = 0;
  EXPECT_EQ(c.dispatch_sender_blocks(1), 5);  // a fixed choice is kept at every batch
  EXPECT_EQ(c.dispatch_sender_blocks(4096), 5);
  EXPECT_EQ(c.combine_sender_blocks(units(1), units(1)), 0);
}

// Engine ids are built from the fingerprint (csrc/bindings/registry.cpp): the ranks of one
// all-to-all agree on it, and a change of any other field changes it, so that a graph that
// torch.compile cached for one configuration is never taken for another.
TEST(EpConfig, FingerprintIgnoresTheRankAndSeesEveryOtherField) {
  const EpConfig base = make(8, {64, 6, 2048, 32});
  EXPECT_EQ(base.fingerprint(0), make(8, {64, 6, 2048, 32}, 5).fingerprint(0));
  EXPECT_NE(base.fingerprint(0), base.fingerprint(1)) << "the salt (dtype) is part of it";
  const auto changed = [&](auto edit) {
    EpConfig c = base;
    edit(c);
    return c.fingerprint(0) != base.fingerprint(0);
  };
  EXPECT_TRUE(changed([](EpConfig& c) { c.world = 4; }));
  EXPECT_TRUE(changed([](EpConfig& c) { c.num_experts = 128; }));
  EXPECT_TRUE(changed([](EpConfig& c) { c.topk = 8; }));
  EXPECT_TRUE(changed([](EpConfig& c) { c.hidden = 4096; }));
  EXPECT_TRUE(changed([](EpConfig& c) { c.max_tokens = 64; }));
  EXPECT_TRUE(changed([](EpConfig& c) { c.expert_capacity += 1; }));
  EXPECT_TRUE(changed([](EpConfig& c) { c.elem_bytes = 4; }));
  EXPECT_TRUE(changed([](EpConfig& c) { c.layout = moe_a2a::Layout::kPacked; }));
  EXPECT_TRUE(changed([](EpConfig& c) { c.num_blocks = 16; }));
  EXPECT_TRUE(changed([](EpConfig& c) { c.groups_per_block = 3; }));
  EXPECT_TRUE(changed([](EpConfig& c) { c.expert_alignment = 128; }));
  EXPECT_TRUE(changed([](EpConfig& c) { c.fp8 = moe_a2a::Fp8Format::kE4M3Fn; }));
  EXPECT_TRUE(changed([](EpConfig& c) { c.fp8_pow2_scales = 1; }));
  EXPECT_TRUE(changed([](EpConfig& c) { c.dispatch_senders = 4; }));
  EXPECT_TRUE(changed([](EpConfig& c) { c.combine_senders = 4; }));
}

}  // namespace
