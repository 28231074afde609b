// Divisor (include/moe_a2a/divisor.h): the multiply-and-shift quotient equals `/` wherever the
// kernels use it (0 <= n < 2^31).
#include "moe_a2a/divisor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>

namespace {

using moe_a2a::Divisor;

void expect_exact(const Divisor& div, int32_t n) {
  ASSERT_EQ(div.quotient(n), n / div.d) << "n=" << n << " d=" << div.d;
  ASSERT_EQ(div.remainder(n), n % div.d) << "n=" << n << " d=" << div.d;
}

TEST(Divisor, EqualsDivisionForSmallDivisors) {
  // Every divisor the kernels see (topk <= 16, experts per rank <= 512) and more, over every n up to
  // 2^16 and near the top of the range.
  for (int32_t d = 1; d <= 4096; ++d) {
    const Divisor div = Divisor::of(d);
    for (int32_t n = 0; n < (1 << 16); ++n) expect_exact(div, n);
    for (int32_t n = INT32_MAX; n > INT32_MAX - 4096; --n) expect_exact(div, n);
  }
}

TEST(Divisor, EqualsDivisionAtTheEdgesOfLargeDivisors) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> any(1, INT32_MAX);
  for (int i = 0; i < 20000; ++i) {
    const int32_t d = i < 31 ? (1 << i) + (i % 2 == 0 ? 0 : -1) : any(rng);
    if (d < 1) continue;
    const Divisor div = Divisor::of(d);
    for (int64_t k : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{INT32_MAX} / d - 1, int64_t{INT32_MAX} / d}) {
      for (int64_t delta : {-1, 0, 1}) {
        const int64_t n = k * d + delta;
        if (n >= 0 && n <= INT32_MAX) expect_exact(div, static_cast<int32_t>(n));
      }
    }
    expect_exact(div, any(rng));
    expect_exact(div, INT32_MAX);
  }
}

TEST(Divisor, RejectsDivisorsBelowOne) {
  EXPECT_THROW(Divisor::of(0), std::invalid_argument);
  EXPECT_THROW(Divisor::of(-3), std::invalid_argument);
}

}  // namespace
