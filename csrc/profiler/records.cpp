#include "profiler/records.h"

#include <algorithm>

namespace moe_a2a {

DecodedProfile decode_profile(const ProfilerRecord* records, const uint32_t* counts, uint32_t capacity,
                              int32_t num_blocks, int32_t waves_per_block) {
  DecodedProfile out;
  for (int32_t b = 0; b < num_blocks; ++b) {
    for (int32_t w = 0; w < waves_per_block; ++w) {
      const size_t track = static_cast<size_t>(b) * waves_per_block + w;
      const uint32_t n = counts[track];
      const uint32_t kept = std::min(n, capacity);
      out.attempted += n;
      out.dropped += n - kept;
      const ProfilerRecord* r = records + track * capacity;
      for (uint32_t i = 0; i < kept; ++i) {
        // A slot can be unwritten when a kernel died between reserving and writing it.
        if (r[i].event >= kNumProfilerEvents || r[i].end < r[i].start || r[i].wave != w || r[i].start == 0) {
          ++out.invalid;
          continue;
        }
        out.events.push_back(ProfiledEvent{b, w, r[i].event, r[i].arg, r[i].start, r[i].end});
      }
    }
  }
  return out;
}

}  // namespace moe_a2a
