// A self-check of dispatch's device fp8 arithmetic (csrc/ep/fp8_rows.cuh) against the software
// definition (include/moe_a2a/ep/fp8.h) on every fp32 bit pattern: where a hardware
// instruction replaces the software form, this is the evidence that the bytes stay the same.
// Used by tests/python/gpu/test_fp8.py.
#pragma once

#include <cstdint>

#include "moe_a2a/ep/fp8.h"
#include "moe_a2a/platform/runtime.h"

namespace moe_a2a {

// Result words (device memory, zeroed by the caller).
struct Fp8CheckResult {
  uint64_t encode_mismatches;  // patterns whose device code differs (two NaN codes agree)
  uint64_t first_bad_encode;   // the smallest such fp32 bit pattern, or ~0 if none
  uint64_t amax_mismatches;    // (running maximum, pattern) pairs whose device fold differs (NaNs agree)
  uint64_t first_bad_amax;     // the smallest such pattern, or ~0 if none
};

// Compares quantize4<format> (scale 1) with fp8_encode, and amax_fold_device with amax_fold
// from a few running maxima, for all 2^32 fp32 bit patterns. `result->first_bad_*` must be ~0
// on entry.
void launch_fp8_device_check(Fp8Format format, Fp8CheckResult* result, hipStream_t stream);

}  // namespace moe_a2a
