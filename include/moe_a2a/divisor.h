// Division by a value fixed for a launch (experts per rank, topk), as a multiply and a shift.
//
// Integer division is a software routine on GPUs: about 20 instructions around a reciprocal at
// every site it is inlined into, and the EP kernels divide by the same few values at many sites on
// their critical paths (docs/design/protocol.md, "Code size"). The host computes a multiplier once;
// each quotient is then a high multiply, an add and a shift.
//
// Method: with s = ceil(log2 d) and m = ceil(2^(32+s) / d), floor(n * m / 2^(32+s)) = floor(n / d)
// for 0 <= n < 2^31. Writing m = (2^(32+s) + e) / d with 0 <= e < d, n * m / 2^(32+s) = n / d +
// n * e / (d * 2^(32+s)); the fraction of n / d is at most (d - 1) / d, so the floor is exact when
// the second term is below 1 / d, i.e. when n * e < 2^(32+s), which holds as e < d <= 2^s and n <
// 2^32. m lies in [2^32, 2^33), so it is kept as mul = m - 2^32 and the quotient is
// (umulhi(n, mul) + n) >> s: the sum stays below 2n < 2^32. d = 2^s gives mul = 0 (a shift).
// tests/cpp/test_divisor.cpp checks it against `/` for every d up to 4096 over a range of n, and at
// the ends of the range for larger d.
#pragma once

#include <cstdint>
#include <stdexcept>

#include "moe_a2a/platform/backend.h"

namespace moe_a2a {

struct Divisor {
  int32_t d = 1;
  uint32_t mul = 0;  // m - 2^32
  uint32_t shift = 0;

  // Host only: the multiplier for divisor d, 1 <= d < 2^31.
  static Divisor of(int32_t d) {
    if (d < 1) throw std::invalid_argument("moe_a2a: Divisor of a value below 1");
    uint32_t s = 0;
    while ((int64_t{1} << s) < d) ++s;
    const uint64_t m = ((uint64_t{1} << (32 + s)) + static_cast<uint64_t>(d) - 1) / static_cast<uint64_t>(d);
    return Divisor{d, static_cast<uint32_t>(m - (uint64_t{1} << 32)), s};
  }

  // n / d and n % d for 0 <= n < 2^31.
  MOE_A2A_HD int32_t quotient(int32_t n) const {
    const uint32_t u = static_cast<uint32_t>(n);
    // The high word of a 32 x 32-bit product: one instruction on both vendors (nvcc IMAD.WIDE.U32 /
    // IMAD.HI, gfx942 v_mul_hi_u32), written portably.
    const uint32_t high = static_cast<uint32_t>((static_cast<uint64_t>(u) * mul) >> 32);
    return static_cast<int32_t>((high + u) >> shift);
  }
  MOE_A2A_HD int32_t remainder(int32_t n) const { return n - quotient(n) * d; }
};

}  // namespace moe_a2a
