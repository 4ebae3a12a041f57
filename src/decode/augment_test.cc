#include "decode/augment.h"

#include <gtest/gtest.h>

#include <cmath>

namespace stoker::decode {
namespace {

// Golden values: the parameters are part of the resume contract (a resumed job must draw what
// the interrupted one would have), so any change to the draws must be deliberate.
TEST(AugmentTest, SeedsAndCropsAreStable) {
  EXPECT_EQ(AugmentSeed(0, 0, 0), DeriveSeed({0, 0, 0, kSaltAugment}));
  EXPECT_NE(AugmentSeed(0, 0, 1), AugmentSeed(0, 0, 0));
  EXPECT_NE(AugmentSeed(0, 1, 0), AugmentSeed(0, 0, 0));
  EXPECT_NE(AugmentSeed(1, 0, 0), AugmentSeed(0, 0, 0));
  Pcg32 rng(AugmentSeed(7, 3, 12345));
  const CropRect c = RandomResizedCropParams(500, 375, {}, rng);
  // Recorded from this implementation; see docs/augment.md for the algorithm.
  EXPECT_EQ(c.x, 27u);
  EXPECT_EQ(c.y, 131u);
  EXPECT_EQ(c.width, 241u);
  EXPECT_EQ(c.height, 222u);
}

// Every crop lies inside the image, and its area and aspect obey the options (up to rounding).
TEST(AugmentTest, RandomResizedCropStaysWithinItsRanges) {
  RandomResizedCropOptions o;
  for (uint32_t sample = 0; sample < 20000; ++sample) {
    const uint32_t w = 1 + sample % 997, h = 1 + (sample * 7) % 613;
    Pcg32 rng(AugmentSeed(1, 0, sample));
    const CropRect c = RandomResizedCropParams(w, h, o, rng);
    ASSERT_GE(c.width, 1u);
    ASSERT_GE(c.height, 1u);
    ASSERT_LE(c.x + c.width, w);
    ASSERT_LE(c.y + c.height, h);
    if (w < 50 || h < 50) continue;  // rounding dominates on tiny images
    const double area = double(c.width) * c.height / (double(w) * h);
    const double aspect = double(c.width) / c.height;
    const bool fallback =
        c.x == (w - c.width) / 2 && c.y == (h - c.height) / 2 && (c.width == w || c.height == h);
    if (fallback) continue;
    EXPECT_GE(area, o.scale_min * 0.9) << w << "x" << h;
    EXPECT_LE(area, o.scale_max * 1.0 + 0.05);
    EXPECT_GE(aspect, o.ratio_min * 0.9);
    EXPECT_LE(aspect, o.ratio_max * 1.1);
  }
}

// When no try fits (an extreme panorama with a square-only ratio), torchvision falls back to the
// largest centred crop with an allowed aspect.
TEST(AugmentTest, FallsBackToTheCentredCrop) {
  RandomResizedCropOptions o;
  o.scale_min = 0.9;
  o.ratio_min = o.ratio_max = 1.0;
  Pcg32 rng(3);
  const CropRect c = RandomResizedCropParams(1000, 10, o, rng);
  EXPECT_EQ(c.width, 10u);
  EXPECT_EQ(c.height, 10u);
  EXPECT_EQ(c.x, 495u);
  EXPECT_EQ(c.y, 0u);
}

// Resize(256) + CenterCrop(224) as one box, checked against the two steps done by hand.
TEST(AugmentTest, ResizeCenterCropBoxMatchesTheTwoSteps) {
  // 500x375: shorter side 375 -> 256, longer int(256 * 500 / 375) = 341; crop offsets
  // round((341 - 224) / 2) = round(58.5) = 58 (half to even), round((256 - 224) / 2) = 16.
  const Box b = ResizeCenterCropBox(500, 375, 256, 224, 224);
  const double sx = 500.0 / 341, sy = 375.0 / 256;
  EXPECT_DOUBLE_EQ(b.x0, 58 * sx);
  EXPECT_DOUBLE_EQ(b.x1, (58 + 224) * sx);
  EXPECT_DOUBLE_EQ(b.y0, 16 * sy);
  EXPECT_DOUBLE_EQ(b.y1, (16 + 224) * sy);
  // Portrait: the width is the shorter side.
  const Box p = ResizeCenterCropBox(300, 600, 256, 224, 224);
  EXPECT_DOUBLE_EQ(p.x0, 16 * 300.0 / 256);
  EXPECT_DOUBLE_EQ(p.y0, 144 * 600.0 / 512);
}

}  // namespace
}  // namespace stoker::decode
