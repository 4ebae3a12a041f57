#include "common/random.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <vector>

namespace stoker {
namespace {

// The PCG32 reference (pcg32_srandom_r / pcg32_random_r from pcg-c-basic), written out here
// independently so a change to Pcg32 cannot silently change both sides of the comparison.
struct ReferencePcg32 {
  uint64_t state = 0, inc = 0;
  ReferencePcg32(uint64_t initstate, uint64_t initseq) {
    inc = (initseq << 1u) | 1u;
    Step();
    state += initstate;
    Step();
  }
  uint32_t Step() {
    const uint64_t oldstate = state;
    state = oldstate * 6364136223846793005ULL + inc;
    const uint32_t xorshifted = static_cast<uint32_t>(((oldstate >> 18u) ^ oldstate) >> 27u);
    const uint32_t rot = static_cast<uint32_t>(oldstate >> 59u);
    return (xorshifted >> rot) | (xorshifted << ((32 - rot) & 31));
  }
};

TEST(Pcg32, MatchesThePublishedReferenceDemo) {
  // pcg32-demo's first line of output (seed 42, sequence 54), from the PCG distribution.
  Pcg32 rng(42, 54);
  const std::array<uint32_t, 6> expected = {0xa15c02b7, 0x7b47f409, 0xba1d3330,
                                            0x83d2f293, 0xbfa4784b, 0xcbed606e};
  for (uint32_t value : expected) EXPECT_EQ(rng.Next(), value);
}

TEST(Pcg32, GoldenValuesForSeed42DefaultStream) {
  // Pinned: sample order, placement and fault injection all derive from these. If this test
  // fails, persisted or replayed orders change: do not update the values casually.
  Pcg32 rng(42);
  const std::array<uint32_t, 8> expected = {0x1d5ddcb9, 0x726c11a4, 0xd44fb6c0, 0x28b658c3,
                                            0x468dee08, 0x18abf114, 0x0d43fd0a, 0x19ff01a7};
  for (uint32_t value : expected) EXPECT_EQ(rng.Next(), value);
}

TEST(Pcg32, AgreesWithReferenceOnManySeedsAndStreams) {
  for (uint64_t seed : {0ull, 1ull, 42ull, 0xdeadbeefull, ~0ull}) {
    for (uint64_t stream : {0ull, 54ull, 0x14057b7ef767814full, ~0ull}) {
      Pcg32 rng(seed, stream);
      ReferencePcg32 ref(seed, stream);
      for (int i = 0; i < 1000; ++i) ASSERT_EQ(rng.Next(), ref.Step()) << seed << " " << stream;
    }
  }
}

TEST(Pcg32, Next64IsTwoDrawsHighFirst) {
  Pcg32 a(9), b(9);
  for (int i = 0; i < 100; ++i) {
    const uint64_t hi = b.Next(), lo = b.Next();
    EXPECT_EQ(a.Next64(), (hi << 32) | lo);
  }
}

TEST(Pcg32, BelowGoldenValues) {
  // Pins the rejection method as well as the generator.
  Pcg32 rng(42);
  std::vector<uint64_t> got;
  got.reserve(8);
  for (int i = 0; i < 8; ++i) got.push_back(rng.Below(1000));
  // Lemire: (x * bound) >> 32 of the golden draws above (none falls in the rejection zone).
  EXPECT_EQ(got, (std::vector<uint64_t>{114, 446, 829, 159, 275, 96, 51, 101}));
}

TEST(Pcg32, BelowStaysInRange) {
  Pcg32 rng(1);
  EXPECT_EQ(rng.Below(0), 0u);
  EXPECT_EQ(rng.Below(1), 0u);
  for (uint64_t bound : {2ull, 3ull, 7ull, 1000ull, 0x80000001ull, 0xFFFFFFFFull, 0x100000000ull,
                         (1ull << 40) + 3, ~0ull}) {
    for (int i = 0; i < 2000; ++i) ASSERT_LT(rng.Below(bound), bound) << bound;
  }
}

TEST(Pcg32, BelowIsUnbiased) {
  // 6 buckets × 60000 draws: every bucket within 3 % of 10000 (≈ 10 standard deviations apart
  // from a modulo bias this test would not notice; the seed is fixed, so this never flakes).
  Pcg32 rng(2024);
  std::array<int, 6> counts{};
  for (int i = 0; i < 60000; ++i) ++counts[rng.Below(6)];
  for (int c : counts) {
    EXPECT_GT(c, 9700);
    EXPECT_LT(c, 10300);
  }
  // A bound of 3·2^30 is where `Next() % bound` would be most biased: the lower third of the
  // range would get twice the share. Unbiased, each third gets about a third.
  const uint64_t bound = 3ull << 30;
  std::array<int, 3> thirds{};
  for (int i = 0; i < 30000; ++i) ++thirds[rng.Below(bound) / (1ull << 30)];
  for (int t : thirds) {
    EXPECT_GT(t, 9500);
    EXPECT_LT(t, 10500);
  }
  // Bounds above 2^32 cover their whole range too.
  const uint64_t big = (1ull << 40) + 12345;
  int upper_half = 0;
  for (int i = 0; i < 10000; ++i) upper_half += rng.Below(big) >= big / 2;
  EXPECT_GT(upper_half, 4700);
  EXPECT_LT(upper_half, 5300);
}

TEST(Pcg32, NextDoubleInUnitInterval) {
  Pcg32 rng(5);
  double sum = 0;
  for (int i = 0; i < 10000; ++i) {
    const double d = rng.NextDouble();
    ASSERT_GE(d, 0.0);
    ASSERT_LT(d, 1.0);
    sum += d;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.02);
}

TEST(Pcg32, SeedsAndStreamsDiffer) {
  Pcg32 a(1), b(2), c(1, 99);
  int same_ab = 0, same_ac = 0;
  for (int i = 0; i < 100; ++i) {
    const uint32_t x = a.Next();
    same_ab += x == b.Next();
    same_ac += x == c.Next();
  }
  EXPECT_LT(same_ab, 3);
  EXPECT_LT(same_ac, 3);
}

}  // namespace
}  // namespace stoker
