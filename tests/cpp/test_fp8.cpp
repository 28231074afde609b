// fp8 quantization (include/moe_a2a/ep/fp8.h), checked against definitions written
// differently: the encode against a search for the nearest code, the scale against its formula.
// The GPU tests then check that dispatch's bytes equal moe_a2a.reference.quantize_fp8 (torch's
// casts), which closes the loop between the three.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "moe_a2a/ep/fp8.h"

namespace {

using moe_a2a::Fp8Format;

const Fp8Format kFormats[] = {Fp8Format::kE4M3Fn, Fp8Format::kE4M3Fnuz};

bool is_nan_code(uint8_t c, Fp8Format f) { return std::isnan(moe_a2a::fp8_decode(c, f)); }

// The finite code nearest to v (|v| <= max), ties to the even code: what round to nearest even
// means, by exhaustive search instead of bit arithmetic.
uint8_t nearest_code(float v, Fp8Format f) {
  int best = -1;
  double best_err = 0;
  for (int c = 0; c < 256; ++c) {
    const uint8_t code = static_cast<uint8_t>(c);
    if (is_nan_code(code, f)) continue;
    const double d = moe_a2a::fp8_decode(code, f);
    if (d == 0.0 && std::signbit(d) != std::signbit(v) && f == Fp8Format::kE4M3Fn) continue;  // keep -0 for -v
    const double err = std::fabs(d - static_cast<double>(v));
    if (best < 0 || err < best_err || (err == best_err && (c & 1) == 0 && (best & 1) == 1)) {
      best = c;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(best);
}

TEST(Fp8, DecodeKnownValues) {
  EXPECT_EQ(moe_a2a::fp8_decode(0x7e, Fp8Format::kE4M3Fn), 448.0f);
  EXPECT_EQ(moe_a2a::fp8_decode(0x7f, Fp8Format::kE4M3Fnuz), 240.0f);
  EXPECT_EQ(moe_a2a::fp8_decode(0x01, Fp8Format::kE4M3Fn), std::ldexp(1.0f, -9));
  EXPECT_EQ(moe_a2a::fp8_decode(0x01, Fp8Format::kE4M3Fnuz), std::ldexp(1.0f, -10));
  EXPECT_EQ(moe_a2a::fp8_decode(0x38, Fp8Format::kE4M3Fn), 1.0f);
  EXPECT_EQ(moe_a2a::fp8_decode(0x40, Fp8Format::kE4M3Fnuz), 1.0f);
  EXPECT_TRUE(is_nan_code(0x7f, Fp8Format::kE4M3Fn));
  EXPECT_TRUE(is_nan_code(0xff, Fp8Format::kE4M3Fn));
  EXPECT_TRUE(is_nan_code(0x80, Fp8Format::kE4M3Fnuz));
}

TEST(Fp8, EveryCodeRoundTrips) {
  for (Fp8Format f : kFormats) {
    for (int c = 0; c < 256; ++c) {
      const uint8_t code = static_cast<uint8_t>(c);
      if (is_nan_code(code, f)) continue;
      EXPECT_EQ(moe_a2a::fp8_encode(moe_a2a::fp8_decode(code, f), f), code) << "code " << c;
    }
  }
}

TEST(Fp8, EncodeIsNearestEvenEverywhere) {
  for (Fp8Format f : kFormats) {
    const float max = moe_a2a::fp8_max(f);
    std::vector<float> values;
    // Every midpoint between neighbouring codes, and a hair on each side of it: where rounding
    // decides.
    for (int c = 0; c < 0x7f; ++c) {
      const float lo = moe_a2a::fp8_decode(static_cast<uint8_t>(c), f);
      const float hi = moe_a2a::fp8_decode(static_cast<uint8_t>(c + 1), f);
      if (std::isnan(hi)) continue;
      const float mid = (lo + hi) / 2;  // exact: both have few significant bits
      values.insert(values.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, max)});
    }
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> log2_mag(-14.0f, std::log2(max));
    for (int i = 0; i < 20000; ++i) values.push_back(std::exp2(log2_mag(rng)));
    for (float v : values) {
      if (v > max) continue;
      for (float s : {v, -v}) {
        const uint8_t want = nearest_code(s, f);
        ASSERT_EQ(moe_a2a::fp8_encode(s, f), want) << "value " << s << " format " << static_cast<int>(f);
      }
    }
  }
}

TEST(Fp8, SaturatesNaNAndZeros) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(moe_a2a::fp8_encode(1e6f, Fp8Format::kE4M3Fn), 0x7e);
  EXPECT_EQ(moe_a2a::fp8_encode(-inf, Fp8Format::kE4M3Fn), 0xfe);
  EXPECT_EQ(moe_a2a::fp8_encode(449.0f, Fp8Format::kE4M3Fn), 0x7e);
  EXPECT_EQ(moe_a2a::fp8_encode(inf, Fp8Format::kE4M3Fnuz), 0x7f);
  EXPECT_TRUE(is_nan_code(moe_a2a::fp8_encode(nan, Fp8Format::kE4M3Fn), Fp8Format::kE4M3Fn));
  EXPECT_EQ(moe_a2a::fp8_encode(nan, Fp8Format::kE4M3Fnuz), 0x80);
  EXPECT_EQ(moe_a2a::fp8_encode(-0.0f, Fp8Format::kE4M3Fn), 0x80);  // e4m3fn keeps -0
  EXPECT_EQ(moe_a2a::fp8_encode(-0.0f, Fp8Format::kE4M3Fnuz), 0x00);
  EXPECT_EQ(moe_a2a::fp8_encode(-1e-9f, Fp8Format::kE4M3Fnuz), 0x00);  // rounds to 0, never to NaN
  EXPECT_EQ(moe_a2a::fp8_encode(std::numeric_limits<float>::denorm_min(), Fp8Format::kE4M3Fn), 0x00);
}

TEST(Fp8, BlockScale) {
  for (Fp8Format f : kFormats) {
    const float max = moe_a2a::fp8_max(f);
    EXPECT_EQ(moe_a2a::fp8_block_scale(max, f, false), 1.0f);
    EXPECT_EQ(moe_a2a::fp8_block_scale(3.0f, f, false), 3.0f / max);
    EXPECT_EQ(moe_a2a::fp8_block_scale(0.0f, f, false), moe_a2a::kFp8AmaxFloor / max);
    EXPECT_TRUE(std::isnan(moe_a2a::fp8_block_scale(std::nanf(""), f, true)));
    EXPECT_TRUE(std::isinf(moe_a2a::fp8_block_scale(std::numeric_limits<float>::infinity(), f, true)));
    // Power-of-two scales: the smallest power of two at least amax / max.
    for (float amax : {max, 1.0f, 3.0f, 1000.0f, 1e-20f, 0.0f}) {
      const float s = moe_a2a::fp8_block_scale(amax, f, true);
      int e = 0;
      EXPECT_EQ(std::frexp(s, &e), 0.5f) << amax;
      const float exact = moe_a2a::fp8_block_scale(amax, f, false);
      EXPECT_GE(s, exact);
      EXPECT_LT(s / 2, exact);
    }
  }
}

TEST(Fp8, AmaxKeepsNaN) {
  float m = 0;
  m = moe_a2a::amax_fold(m, -3.0f);
  EXPECT_EQ(m, 3.0f);
  m = moe_a2a::amax_fold(m, std::nanf(""));
  EXPECT_TRUE(std::isnan(m));
  m = moe_a2a::amax_fold(m, 1e9f);
  EXPECT_TRUE(std::isnan(m));
  EXPECT_EQ(moe_a2a::amax_fold(2.0f, 1.0f), 2.0f);
}

}  // namespace
