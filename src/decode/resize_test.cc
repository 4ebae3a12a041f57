// Resizer against a naive restatement of Pillow's resampling written here: the same windows,
// weights and 22-bit fixed point, but one pixel and one channel at a time, over whole images,
// with none of the kernel's shortcuts (row ranges, vector paths, padding, reads past a row).
// Agreement with Pillow itself is checked in tests/python/test_transform_pixels.py.
#include "decode/resize.h"

#include <gtest/gtest.h>

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

// Smooth content with some structure, closer to photos than noise (rounding ties are rarer in
// noise; smooth gradients hit them).
TestImage Gradient(uint32_t w, uint32_t h) {
  TestImage image(w, h);
  for (uint32_t y = 0; y < h; ++y) {
    for (uint32_t x = 0; x < w; ++x) {
      image.at(x, y)[0] = uint8_t(x * 255 / std::max(w - 1, 1u));
      image.at(x, y)[1] = uint8_t(y * 255 / std::max(h - 1, 1u));
      image.at(x, y)[2] = uint8_t((x * 7 + y * 13) % 256);
    }
  }
  return image;
}

// --- The reference -----------------------------------------------------------------------

double Triangle(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

double Cubic(double x) {
  const double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

struct Window {
  int start = 0;
  std::vector<int32_t> coefs;
};

std::vector<Window> Windows(int in_size, float in0, float in1, int out_size, Interpolation filter) {
  const double support_1 = filter == Interpolation::kBicubic ? 2.0 : 1.0;
  double (*weight)(double) = filter == Interpolation::kBicubic ? Cubic : Triangle;
  const double scale = double(in1 - in0) / out_size;
  const double filter_scale = scale < 1.0 ? 1.0 : scale;
  const double support = support_1 * filter_scale;
  std::vector<Window> windows(out_size);
  for (int i = 0; i < out_size; ++i) {
    const double center = in0 + (i + 0.5) * scale;
    int lo = int(std::floor(center - support + 0.5)), hi = int(std::floor(center + support + 0.5));
    if (lo < 0) lo = 0;
    if (hi > in_size) hi = in_size;
    std::vector<double> w;
    double total = 0;
    for (int k = lo; k < hi; ++k) {
      w.push_back(weight((k - center + 0.5) * (1.0 / filter_scale)));
      total += w.back();
    }
    windows[i].start = lo;
    for (double v : w) {
      if (total != 0.0) v /= total;
      windows[i].coefs.push_back(int32_t(v < 0 ? -0.5 + v * (1 << 22) : 0.5 + v * (1 << 22)));
    }
  }
  return windows;
}

uint8_t Clip(int64_t sum) {
  const int64_t v = sum >> 22;
  return uint8_t(v < 0 ? 0 : v > 255 ? 255 : v);
}

// One pass along x (horizontal) or y over a whole image.
TestImage Pass(const TestImage& in, const std::vector<Window>& windows, bool horizontal) {
  TestImage out(horizontal ? uint32_t(windows.size()) : in.width,
                horizontal ? in.height : uint32_t(windows.size()));
  for (uint32_t y = 0; y < out.height; ++y) {
    for (uint32_t x = 0; x < out.width; ++x) {
      const Window& win = windows[horizontal ? x : y];
      for (int c = 0; c < 3; ++c) {
        int64_t sum = 1 << 21;
        for (size_t k = 0; k < win.coefs.size(); ++k) {
          const int i = win.start + int(k);
          sum += int64_t{win.coefs[k]} * (horizontal ? in.at(i, y) : in.at(x, i))[c];
        }
        out.at(x, y)[c] = Clip(sum);
      }
    }
  }
  return out;
}

TestImage Reference(const TestImage& src, Box box, Interpolation filter, uint32_t out_w,
                    uint32_t out_h) {
  const auto clamp = [](double v, uint32_t limit) {
    return float(std::isnan(v) ? 0.0 : std::fmin(std::fmax(v, 0.0), double(limit)));
  };
  const float x0 = clamp(box.x0, src.width), y0 = clamp(box.y0, src.height);
  const float x1 = std::fmax(clamp(box.x1, src.width), x0);
  const float y1 = std::fmax(clamp(box.y1, src.height), y0);
  TestImage out(out_w, out_h);
  if (x0 == std::trunc(x0) && y0 == std::trunc(y0) && x1 - x0 == float(out_w) &&
      y1 - y0 == float(out_h)) {
    for (uint32_t y = 0; y < out_h; ++y) {
      std::memcpy(out.at(0, y), src.at(uint32_t(x0), uint32_t(y0) + y), out_w * 3);
    }
    return out;
  }
  if (filter == Interpolation::kNearest) {
    const double sx = double(x1 - x0) / out_w, sy = double(y1 - y0) / out_h;
    double py = y0 + sy * 0.5;
    for (uint32_t y = 0; y < out_h; ++y, py += sy) {
      double px = x0 + sx * 0.5;
      for (uint32_t x = 0; x < out_w; ++x, px += sx) {
        static const uint8_t kBlack[3] = {0, 0, 0};  // outside: black, as in Pillow
        const bool inside = px < src.width && py < src.height;
        std::memcpy(out.at(x, y), inside ? src.at(uint32_t(px), uint32_t(py)) : kBlack, 3);
      }
    }
    return out;
  }
  const auto horizontal = Windows(int(src.width), x0, x1, int(out_w), filter);
  const auto vertical = Windows(int(src.height), y0, y1, int(out_h), filter);
  const int64_t shrink_h = int64_t{src.height} - out_h, shrink_w = int64_t{src.width} - out_w;
  if (shrink_h > 0 && shrink_h > 2 * shrink_w) {
    return Pass(Pass(src, vertical, false), horizontal, true);
  }
  return Pass(Pass(src, horizontal, true), vertical, false);
}

// --- Helpers -----------------------------------------------------------------------------

TestImage Resize(const TestImage& src, Box box, Interpolation filter, uint32_t w, uint32_t h,
                 size_t padding = 5) {
  TestImage out(w, h, padding);
  Resizer().Resize(src.view(), box, filter, out.mutable_view());
  return out;
}

// Compares pixels and checks that the padding after each row was left alone.
void ExpectSame(const TestImage& actual, const TestImage& expected, const std::string& what) {
  ASSERT_EQ(actual.width, expected.width);
  ASSERT_EQ(actual.height, expected.height);
  int differences = 0;
  for (uint32_t y = 0; y < actual.height; ++y) {
    for (uint32_t x = 0; x < actual.width * 3; ++x) {
      if (actual.at(0, y)[x] != expected.at(0, y)[x] && ++differences <= 3) {
        ADD_FAILURE() << what << ": pixel (" << x / 3 << ", " << y << ") channel " << x % 3 << ": "
                      << int(actual.at(0, y)[x]) << " != " << int(expected.at(0, y)[x]);
      }
    }
    for (size_t i = actual.width * 3; i < actual.stride; ++i) {
      ASSERT_EQ(actual.at(0, y)[i], 0xEE) << what << ": row " << y << " padding overwritten";
    }
  }
  EXPECT_EQ(differences, 0) << what;
}

const Interpolation kFilters[] = {Interpolation::kNearest, Interpolation::kBilinear,
                                  Interpolation::kBicubic};

std::string Describe(Interpolation f, const Box& b, uint32_t w, uint32_t h) {
  return "filter " + std::to_string(int(f)) + " box (" + std::to_string(b.x0) + ", " +
         std::to_string(b.y0) + ", " + std::to_string(b.x1) + ", " + std::to_string(b.y1) +
         ") -> " + std::to_string(w) + "x" + std::to_string(h);
}

// --- Tests -------------------------------------------------------------------------------

TEST(ResizeTest, MatchesReferenceOnRandomBoxesAndSizes) {
  Pcg32 rng(42);
  const TestImage sources[] = {Noise(173, 131, 1), Gradient(260, 190), Noise(40, 300, 2)};
  for (const TestImage& src : sources) {
    for (int trial = 0; trial < 40; ++trial) {
      const double x0 = rng.NextDouble() * src.width * 0.8;
      const double y0 = rng.NextDouble() * src.height * 0.8;
      Box box{x0, y0, x0 + 0.5 + rng.NextDouble() * (src.width - x0),
              y0 + 0.5 + rng.NextDouble() * (src.height - y0)};
      if (trial % 4 == 0)
        box = {std::floor(box.x0), std::floor(box.y0), std::ceil(box.x1), std::ceil(box.y1)};
      // Mostly output widths near the vector kernels' steps, some far from the box's size.
      const uint32_t w = 1 + uint32_t(rng.Below(trial % 2 ? 24 : 400));
      const uint32_t h = 1 + uint32_t(rng.Below(trial % 3 ? 300 : 20));
      for (Interpolation f : kFilters) {
        ExpectSame(Resize(src, box, f, w, h), Reference(src, box, f, w, h), Describe(f, box, w, h));
      }
    }
  }
}

TEST(ResizeTest, TypicalTrainingCrops) {
  // RandomResizedCrop-like boxes, fractional after DCT scaling, to 224x224; and the validation
  // resize of a whole image to a 256 short side (which takes the vertical-first order).
  const TestImage photo = Gradient(500, 400);
  const TestImage noise = Noise(470, 390, 3);
  for (Interpolation f : kFilters) {
    const Box crop{20.3, 30.7, 370.3, 320.7};
    ExpectSame(Resize(photo, crop, f, 224, 224), Reference(photo, crop, f, 224, 224),
               Describe(f, crop, 224, 224));
    const Box whole{0, 0, 470, 390};
    ExpectSame(Resize(noise, whole, f, 308, 256), Reference(noise, whole, f, 308, 256),
               Describe(f, whole, 308, 256));
    ExpectSame(Resize(noise, whole, f, 256, 120), Reference(noise, whole, f, 256, 120),
               Describe(f, whole, 256, 120));
  }
}

TEST(ResizeTest, OnePixelSourceFillsTheOutput) {
  TestImage src(1, 1);
  std::memcpy(src.at(0, 0), "\x10\x80\xF0", 3);
  for (Interpolation f : kFilters) {
    const TestImage out = Resize(src, {0, 0, 1, 1}, f, 7, 5);
    for (uint32_t y = 0; y < 5; ++y) {
      for (uint32_t x = 0; x < 7; ++x) {
        ASSERT_EQ(std::memcmp(out.at(x, y), "\x10\x80\xF0", 3), 0)
            << int(f) << " " << x << "," << y;
      }
    }
  }
}

TEST(ResizeTest, IntegerBoxOfOutputSizeIsACrop) {
  const TestImage src = Noise(50, 40, 4);
  for (Interpolation f : kFilters) {
    const TestImage out = Resize(src, {10, 5, 30, 25}, f, 20, 20);
    for (uint32_t y = 0; y < 20; ++y) {
      ASSERT_EQ(std::memcmp(out.at(0, y), src.at(10, 5 + y), 60), 0) << int(f);
    }
  }
}

TEST(ResizeTest, BoxesAtTheBorders) {
  const TestImage src = Gradient(97, 61);
  const Box boxes[] = {{0, 0, 30.5, 20.25}, {66.5, 40.75, 97, 61}, {0, 0.5, 97, 60.5},
                       {96, 0, 97, 61},     {0, 60, 97, 61},       {96.5, 60.5, 97, 61},
                       {0, 0, 97, 61}};
  for (Interpolation f : kFilters) {
    for (const Box& box : boxes) {
      for (uint32_t size : {1u, 3u, 33u, 150u}) {
        ExpectSame(Resize(src, box, f, size, size + 1), Reference(src, box, f, size, size + 1),
                   Describe(f, box, size, size + 1));
      }
    }
  }
}

TEST(ResizeTest, UpscalingAndZeroWidthBoxes) {
  const TestImage src = Noise(9, 7, 5);
  for (Interpolation f : kFilters) {
    for (const Box& box :
         {Box{0, 0, 9, 7}, Box{2.25, 1.5, 5.75, 4.0}, Box{3, 3, 3, 5}, Box{9, 7, 9, 7}}) {
      ExpectSame(Resize(src, box, f, 61, 45), Reference(src, box, f, 61, 45),
                 Describe(f, box, 61, 45));
    }
  }
}

TEST(ResizeTest, LargeDownscaleFactors) {
  // 4000 -> 7 widens the filter to ~570 source pixels per side: long windows for the kernels.
  const TestImage wide = Noise(4000, 3, 6);
  const TestImage tall = Noise(3, 1500, 7);
  for (Interpolation f : {Interpolation::kBilinear, Interpolation::kBicubic}) {
    ExpectSame(Resize(wide, {0, 0, 4000, 3}, f, 7, 2), Reference(wide, {0, 0, 4000, 3}, f, 7, 2),
               "4000 -> 7");
    ExpectSame(Resize(tall, {0, 0, 3, 1500}, f, 2, 5), Reference(tall, {0, 0, 3, 1500}, f, 2, 5),
               "1500 -> 5");
  }
  // A flat image stays flat at any factor (the normalized weights sum to one).
  TestImage flat(4000, 2);
  for (uint32_t x = 0; x < 4000; ++x) std::memcpy(flat.at(x, 0), "\x01\x7F\xFF", 3);
  std::memcpy(flat.at(0, 1), flat.at(0, 0), 4000 * 3);
  for (Interpolation f : kFilters) {
    const TestImage out = Resize(flat, {0, 0, 4000, 2}, f, 7, 1);
    for (uint32_t x = 0; x < 7; ++x) EXPECT_EQ(std::memcmp(out.at(x, 0), "\x01\x7F\xFF", 3), 0);
  }
}

TEST(ResizeTest, BoxOutsideTheImageIsClamped) {
  const TestImage src = Noise(60, 50, 8);
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::pair<Box, Box> cases[] = {
      {{-10.5, -3, 30, 20}, {0, 0, 30, 20}},
      {{40.5, 30.25, 75, 90}, {40.5, 30.25, 60, 50}},
      {{-inf, nan, inf, 1e300}, {0, 0, 60, 50}},
      {{70, 60, 80, 90}, {60, 50, 60, 50}},  // entirely outside: the nearest edge pixel
      {{30, 30, 20, 20}, {30, 30, 30, 30}},  // inverted: empty at its start
  };
  for (Interpolation f : kFilters) {
    for (const auto& [box, clamped] : cases) {
      ExpectSame(Resize(src, box, f, 17, 13), Resize(src, clamped, f, 17, 13),
                 Describe(f, box, 17, 13));
    }
  }
}

TEST(ResizeTest, TightBuffersAreNotOverrun) {
  // The vector kernels read 16 bytes at a time and may read past a row's end into the next
  // row; the last row of the buffer must not be read past (AddressSanitizer builds check it).
  Pcg32 rng(12);
  for (int trial = 0; trial < 60; ++trial) {
    const uint32_t sw = 1 + uint32_t(rng.Below(90)), sh = 1 + uint32_t(rng.Below(60));
    const TestImage src = Noise(sw, sh, 100 + trial, /*padding=*/0);
    const uint32_t w = 1 + uint32_t(rng.Below(70)), h = 1 + uint32_t(rng.Below(70));
    const double x0 = rng.NextDouble() * sw * 0.5, y0 = rng.NextDouble() * sh * 0.5;
    const Box box{x0, y0, x0 + rng.NextDouble() * sw, y0 + rng.NextDouble() * sh};
    for (Interpolation f : kFilters) {
      ExpectSame(Resize(src, box, f, w, h, /*padding=*/0), Reference(src, box, f, w, h),
                 Describe(f, box, w, h));
    }
  }
}

TEST(ResizeTest, EmptyImages) {
  TestImage out(4, 3);
  Resizer resizer;
  resizer.Resize({nullptr, 0, 0, 0}, {0, 0, 1, 1}, Interpolation::kBilinear, out.mutable_view());
  for (uint32_t y = 0; y < 3; ++y) {
    for (uint32_t x = 0; x < 12; ++x) EXPECT_EQ(out.at(0, y)[x], 0);
  }
  const TestImage src = Noise(5, 5, 9);
  resizer.Resize(src.view(), {0, 0, 5, 5}, Interpolation::kBicubic, {nullptr, 0, 0, 0});
}

TEST(ResizeTest, OneResizerAcrossChangingSizes) {
  // Buffers are reused: shrinking and growing calls must not see stale state.
  Resizer resizer;
  const TestImage big = Noise(300, 200, 10), small = Noise(20, 10, 11);
  for (int round = 0; round < 2; ++round) {
    for (const auto& [src, w, h] :
         {std::tuple{&big, 224u, 224u}, std::tuple{&small, 5u, 40u}, std::tuple{&big, 3u, 2u}}) {
      for (Interpolation f : kFilters) {
        const Box box{0.5, 0.5, src->width - 0.5, src->height - 0.25};
        TestImage out(w, h);
        resizer.Resize(src->view(), box, f, out.mutable_view());
        ExpectSame(out, Reference(*src, box, f, w, h), Describe(f, box, w, h));
      }
    }
  }
}

}  // namespace
}  // namespace stoker::decode
