// Host side of the profiler's record format: turns the per-track buffers copied from the
// device into events with their block, and counts what was dropped or never written.
// Torch-free and GPU-free (tested by tests/cpp/test_profiler.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "moe_a2a/profiler.h"

namespace moe_a2a {

struct ProfiledEvent {
  int32_t block;
  int32_t wave;
  int32_t event;  // ProfilerEvent
  int32_t arg;
  uint64_t start;  // wall_clock() ticks of the recording GPU
  uint64_t end;
};

struct DecodedProfile {
  std::vector<ProfiledEvent> events;
  uint64_t attempted = 0;  // records the kernels tried to write
  uint64_t dropped = 0;    // past a track's capacity: counted, not written
  uint64_t invalid = 0;    // in range but unusable (unknown event, end < start, wrong track)
};

// records: [num_blocks * waves_per_block][capacity]; counts: [num_blocks * waves_per_block].
DecodedProfile decode_profile(const ProfilerRecord* records, const uint32_t* counts, uint32_t capacity,
                              int32_t num_blocks, int32_t waves_per_block);

}  // namespace moe_a2a
