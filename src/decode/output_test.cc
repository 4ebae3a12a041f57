// WriteSample against a naive reference written here: every (channel, y, x) of every dtype,
// layout and flip, on widths around the vector kernels' steps (5 pixels) and chunks (256).
#include "decode/output.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "testing/test_images.h"

namespace stoker::decode {
namespace {

using test::Noise;
using test::TestImage;

// Element (c, y, x) of a sample: its index in either layout.
size_t Index(const OutputSpec& spec, int c, uint32_t y, uint32_t x) {
  return spec.layout == Layout::kNCHW ? (size_t(c) * spec.height + y) * spec.width + x
                                      : (size_t(y) * spec.width + x) * 3 + c;
}

// What torchvision's ToTensor + Normalize compute, in float32 step by step.
float Normalized(uint8_t v, const OutputSpec& spec, int c) {
  return (float(v) / 255.0f - spec.mean[c]) / spec.std[c];
}

void Check(const TestImage& src, const OutputSpec& spec, bool flip) {
  // One guard byte past the sample catches writes beyond sample_bytes().
  std::vector<uint8_t> out(spec.sample_bytes() + 1, 0xA5);
  WriteSample(src.view(), flip, spec, out.data());
  ASSERT_EQ(out.back(), 0xA5) << "wrote past the sample";
  for (int c = 0; c < 3; ++c) {
    for (uint32_t y = 0; y < spec.height; ++y) {
      for (uint32_t x = 0; x < spec.width; ++x) {
        const uint8_t pixel = src.at(flip ? spec.width - 1 - x : x, y)[c];
        const size_t i = Index(spec, c, y, x);
        if (spec.dtype == DType::kUint8) {
          ASSERT_EQ(out[i], pixel) << "c " << c << " y " << y << " x " << x << " flip " << flip;
        } else {
          float value;
          std::memcpy(&value, out.data() + i * 4, 4);
          // Scale and bias instead of torchvision's divisions: a few float ulps of the larger
          // of the result and pixel / (255 std).
          const float tolerance = 1e-6f * std::max(1.0f, 1.0f / spec.std[c]);
          ASSERT_NEAR(value, Normalized(pixel, spec, c), tolerance)
              << "c " << c << " y " << y << " x " << x << " flip " << flip;
        }
      }
    }
  }
}

TEST(OutputTest, EveryLayoutDtypeAndFlipMatchesTheReference) {
  const std::pair<uint32_t, uint32_t> sizes[] = {{1, 1},  {2, 3},  {5, 2},   {6, 4},   {7, 1},
                                                 {11, 9}, {16, 5}, {224, 3}, {300, 2}, {513, 2}};
  uint64_t seed = 0;
  for (const auto& [w, h] : sizes) {
    ++seed;
    // Without padding the buffer ends at the last pixel, so that AddressSanitizer builds see a
    // read past it (the flip kernel loads 16 bytes at a time).
    const TestImage src = Noise(w, h, seed, /*padding=*/seed % 2 ? 7 : 0);
    for (DType dtype : {DType::kUint8, DType::kFloat32}) {
      for (Layout layout : {Layout::kNCHW, Layout::kNHWC}) {
        OutputSpec spec;
        spec.width = w;
        spec.height = h;
        spec.dtype = dtype;
        spec.layout = layout;
        for (bool flip : {false, true}) {
          SCOPED_TRACE(::testing::Message()
                       << w << "x" << h << " dtype " << int(dtype) << " layout " << int(layout));
          Check(src, spec, flip);
        }
      }
    }
  }
}

TEST(OutputTest, CustomMeanAndStd) {
  const TestImage src = Noise(9, 4, 99);
  OutputSpec spec;
  spec.width = 9;
  spec.height = 4;
  const float mean[3] = {0.5f, 0.0f, 1.0f}, std[3] = {0.5f, 1.0f, 0.01f};
  std::memcpy(spec.mean, mean, sizeof mean);
  std::memcpy(spec.std, std, sizeof std);
  Check(src, spec, false);
  // 0 and 255 map to the ends of the range exactly enough for mean 0, std 1.
  TestImage extremes(2, 1);
  std::memset(extremes.at(0, 0), 0, 3);
  std::memset(extremes.at(1, 0), 255, 3);
  spec.width = 2;
  spec.height = 1;
  std::vector<float> out(6);
  WriteSample(extremes.view(), false, spec, out.data());
  EXPECT_FLOAT_EQ(out[2], 0.0f);  // NCHW: channel 1 of pixel 0
  EXPECT_FLOAT_EQ(out[3], 1.0f);  // channel 1 of pixel 1
}

TEST(OutputTest, SizeMismatchWritesZeros) {
  const TestImage src = Noise(4, 4, 3);
  OutputSpec spec;
  spec.width = 5;
  spec.height = 4;
  std::vector<uint8_t> out(spec.sample_bytes(), 0xA5);
  WriteSample(src.view(), true, spec, out.data());
  for (uint8_t b : out) ASSERT_EQ(b, 0);
}

}  // namespace
}  // namespace stoker::decode
