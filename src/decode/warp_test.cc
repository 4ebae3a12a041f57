// Warp: exact cases (quarter turns, identity), then properties of arbitrary angles and zooms
// checked against the plain geometry of a rotation about the centre. Bit-exactness with Pillow
// is checked in tests/python/test_transform_pixels.py.
#include "decode/warp.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/random.h"
#include "testing/test_images.h"

namespace stoker::decode {
namespace {

using test::Noise;
using test::TestImage;

TestImage Warped(const TestImage& src, double angle, double zoom, Interpolation f,
                 const uint8_t fill[3] = nullptr, size_t padding = 5) {
  WarpParams params;
  params.angle_degrees = angle;
  params.zoom = zoom;
  params.interpolation = f;
  if (fill) std::memcpy(params.fill, fill, 3);
  TestImage out(src.width, src.height, padding);
  Warp(src.view(), params, out.mutable_view());
  for (uint32_t y = 0; y < out.height; ++y) {
    for (size_t i = out.width * 3; i < out.stride; ++i) {
      EXPECT_EQ(out.at(0, y)[i], 0xEE) << "row padding overwritten";
    }
  }
  return out;
}

const Interpolation kFilters[] = {Interpolation::kNearest, Interpolation::kBilinear,
                                  Interpolation::kBicubic};

bool SamePixel(const uint8_t* a, const uint8_t* b) { return std::memcmp(a, b, 3) == 0; }

TEST(WarpTest, IdentityAndHalfTurn) {
  const TestImage src = Noise(37, 22, 1);
  for (Interpolation f : kFilters) {
    for (double angle : {0.0, 360.0, -720.0}) {
      const TestImage same = Warped(src, angle, 1, f);
      for (uint32_t y = 0; y < src.height; ++y) {
        ASSERT_EQ(std::memcmp(same.at(0, y), src.at(0, y), src.width * 3), 0) << angle;
      }
    }
    for (double angle : {180.0, -180.0, 540.0}) {
      const TestImage turned = Warped(src, angle, 1, f);
      for (uint32_t y = 0; y < src.height; ++y) {
        for (uint32_t x = 0; x < src.width; ++x) {
          ASSERT_TRUE(SamePixel(turned.at(x, y), src.at(src.width - 1 - x, src.height - 1 - y)))
              << "angle " << angle << " filter " << int(f) << " at " << x << "," << y;
        }
      }
    }
  }
}

TEST(WarpTest, QuarterTurnsOfASquare) {
  const TestImage src = Noise(24, 24, 2);
  const uint32_t n = 24;
  for (Interpolation f : kFilters) {
    const TestImage left = Warped(src, 90, 1, f);    // counter-clockwise
    const TestImage right = Warped(src, -90, 1, f);  // clockwise
    for (uint32_t y = 0; y < n; ++y) {
      for (uint32_t x = 0; x < n; ++x) {
        SCOPED_TRACE(::testing::Message() << "filter " << int(f) << " at " << x << "," << y);
        ASSERT_TRUE(SamePixel(left.at(x, y), src.at(n - 1 - y, x)));
        ASSERT_TRUE(SamePixel(right.at(x, y), src.at(y, n - 1 - x)));
      }
    }
  }
}

// Where output pixel (x, y) samples the source under a counter-clockwise rotation by `angle`
// about the centre, content enlarged by `zoom` — the plain geometry, no Pillow details.
void SourcePosition(const TestImage& image, double angle, double zoom, uint32_t x, uint32_t y,
                    double* sx, double* sy) {
  const double a = angle * M_PI / 180, cx = image.width / 2.0, cy = image.height / 2.0;
  const double dx = (x + 0.5 - cx) / zoom, dy = (y + 0.5 - cy) / zoom;
  *sx = cx + std::cos(a) * dx - std::sin(a) * dy;
  *sy = cy + std::sin(a) * dx + std::cos(a) * dy;
}

TEST(WarpTest, ArbitraryAnglesFollowTheGeometry) {
  const TestImage src = Noise(61, 47, 3);
  const uint8_t fill[3] = {1, 2, 3};
  Pcg32 rng(4);
  int checked_nearest = 0, ties = 0;
  for (int trial = 0; trial < 30; ++trial) {
    const double angle = rng.NextDouble() * 360 - 180;
    const double zoom = trial % 3 == 0 ? 1.0 : 0.5 + rng.NextDouble() * 1.5;
    for (Interpolation f : kFilters) {
      const TestImage out = Warped(src, angle, zoom, f, fill);
      for (uint32_t y = 0; y < out.height; ++y) {
        for (uint32_t x = 0; x < out.width; ++x) {
          double sx, sy;
          SourcePosition(src, angle, zoom, x, y, &sx, &sy);
          const uint8_t* got = out.at(x, y);
          // Pillow steps nearest positions in 16.16 fixed point: up to ~1e-3 px off here.
          const double margin = 1e-3;
          if (sx < -margin || sy < -margin || sx > src.width + margin || sy > src.height + margin) {
            ASSERT_TRUE(SamePixel(got, fill)) << "outside, at " << x << "," << y;
            continue;
          }
          if (sx < margin || sy < margin || sx > src.width - margin || sy > src.height - margin) {
            continue;  // on the edge: either side is right
          }
          if (f == Interpolation::kNearest) {
            const bool tie =
                std::fabs(sx - std::round(sx)) < margin || std::fabs(sy - std::round(sy)) < margin;
            if (tie) {
              ++ties;
              continue;
            }
            ++checked_nearest;
            ASSERT_TRUE(SamePixel(got, src.at(uint32_t(sx), uint32_t(sy)))) << x << "," << y;
          } else if (f == Interpolation::kBilinear && sx > 1 && sy > 1 && sx < src.width - 1 &&
                     sy < src.height - 1 && std::fabs(sx - std::round(sx - 0.5) - 0.5) > 1e-9 &&
                     std::fabs(sy - std::round(sy - 0.5) - 0.5) > 1e-9) {
            // A bilinear value lies within its four neighbours (inside, away from the edges, and
            // not on a line of pixel centres, where the neighbourhood is a rounding's choice and
            // truncating the result of one just below a whole value drops it by one).
            const auto ix = uint32_t(sx - 0.5), iy = uint32_t(sy - 0.5);
            for (int c = 0; c < 3; ++c) {
              const int v[4] = {src.at(ix, iy)[c], src.at(ix + 1, iy)[c], src.at(ix, iy + 1)[c],
                                src.at(ix + 1, iy + 1)[c]};
              ASSERT_GE(got[c], *std::min_element(v, v + 4)) << x << "," << y;
              ASSERT_LE(got[c], *std::max_element(v, v + 4)) << x << "," << y;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked_nearest, 10000);
  EXPECT_LT(ties, checked_nearest / 100);
}

TEST(WarpTest, ZoomEnlargesAboutTheCentre) {
  TestImage src(8, 8);
  for (uint32_t y = 0; y < 8; ++y) {
    for (uint32_t x = 0; x < 8; ++x) {
      const std::array<uint8_t, 3> pixel{uint8_t(x), uint8_t(y), 9};
      std::memcpy(src.at(x, y), pixel.data(), 3);
    }
  }
  const TestImage out = Warped(src, 0, 2, Interpolation::kNearest);
  // Zoom 2: output pixel x samples source (x + 0.5 - 4) / 2 + 4, i.e. pixels 2..5 fill it.
  for (uint32_t y = 0; y < 8; ++y) {
    for (uint32_t x = 0; x < 8; ++x) {
      EXPECT_EQ(out.at(x, y)[0], 2 + x / 2) << x;
      EXPECT_EQ(out.at(x, y)[1], 2 + y / 2) << y;
    }
  }
  // Zoom 0.5 shrinks the content into the middle half (output x samples source 2x - 3, every
  // other pixel); the rest is fill.
  const uint8_t fill[3] = {77, 77, 77};
  const TestImage small = Warped(src, 0, 0.5, Interpolation::kNearest, fill);
  for (uint32_t x : {0u, 1u, 6u, 7u}) EXPECT_TRUE(SamePixel(small.at(x, 4), fill)) << x;
  for (uint32_t x = 2; x <= 5; ++x) EXPECT_EQ(small.at(x, 4)[0], 2 * x - 3) << x;
}

TEST(WarpTest, ExtremeZoomOutTakesTheDoublePath) {
  // Source positions beyond Pillow's 16.16 fixed-point range: only the centre maps inside.
  const TestImage src = Noise(200, 100, 5);
  const uint8_t fill[3] = {0, 255, 0};
  const TestImage out = Warped(src, 30, 1e-3, Interpolation::kNearest, fill);
  int inside = 0;
  for (uint32_t y = 0; y < out.height; ++y) {
    for (uint32_t x = 0; x < out.width; ++x) inside += !SamePixel(out.at(x, y), fill);
  }
  EXPECT_LE(inside, 1);
}

TEST(WarpTest, DegenerateParametersGiveFill) {
  const TestImage src = Noise(10, 6, 6);
  const uint8_t fill[3] = {5, 6, 7};
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (auto [angle, zoom] : {std::pair{0.0, 0.0}, std::pair{10.0, -1.0}, std::pair{nan, 1.0},
                             std::pair{0.0, nan}, std::pair{1e308 * 10, 1.0}}) {
    for (Interpolation f : kFilters) {
      const TestImage out = Warped(src, angle, zoom, f, fill);
      for (uint32_t y = 0; y < out.height; ++y) {
        for (uint32_t x = 0; x < out.width; ++x) ASSERT_TRUE(SamePixel(out.at(x, y), fill));
      }
    }
  }
  // An empty source: all fill; an empty destination: nothing to do.
  WarpParams params;
  std::memcpy(params.fill, fill, 3);
  TestImage out(3, 2);
  Warp({nullptr, 0, 0, 0}, params, out.mutable_view());
  for (uint32_t x = 0; x < 3; ++x) EXPECT_TRUE(SamePixel(out.at(x, 1), fill));
  Warp(src.view(), params, {nullptr, 0, 0, 0});
}

TEST(WarpTest, TinyAndTightImages) {
  // Buffers ending right after the last pixel: nearest moves 4 bytes where it safely can, and
  // AddressSanitizer builds check that it never reads or writes past them.
  for (auto [w, h] : {std::pair{1u, 1u}, std::pair{2u, 1u}, std::pair{1u, 3u}, std::pair{9u, 7u}}) {
    const TestImage src = Noise(w, h, 7, /*padding=*/0);
    for (Interpolation f : kFilters) {
      const TestImage same = Warped(src, 0, 1, f, nullptr, /*padding=*/0);
      for (uint32_t y = 0; y < h; ++y) {
        EXPECT_EQ(std::memcmp(same.at(0, y), src.at(0, y), w * 3), 0);
      }
      for (double angle : {33.0, 90.0, 180.0, -150.0}) {
        for (double zoom : {1.0, 1.3}) Warped(src, angle, zoom, f, nullptr, /*padding=*/0);
      }
    }
  }
}

}  // namespace
}  // namespace stoker::decode
