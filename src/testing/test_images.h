// Test images: padded RGB buffers for the decode kernels' tests, seeded noise, seeded
// photo-like pixels (smooth gradients, edges and noise, so JPEG behaves as on real photos rather
// than on flat colour) and encoders to JPEG (libjpeg) and PNG (libpng).
// Not thread-safe: each test builds its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "decode/image.h"

namespace stoker::test {

// An RGB image whose rows are `padding` bytes longer than their pixels, filled with 0xEE: a
// kernel that takes width * 3 for the stride, or writes past a row, shows up. With no padding
// the buffer ends right after the last pixel, so that AddressSanitizer sees a read past it.
struct TestImage {
  uint32_t width = 0, height = 0;
  size_t stride = 0;
  std::vector<uint8_t> bytes;
  TestImage(uint32_t w, uint32_t h, size_t padding = 5)
      : width(w), height(h), stride(size_t(w) * 3 + padding), bytes(stride * h, 0xEE) {}
  uint8_t* at(uint32_t x, uint32_t y) { return bytes.data() + y * stride + x * 3; }
  const uint8_t* at(uint32_t x, uint32_t y) const { return bytes.data() + y * stride + x * 3; }
  decode::ImageView view() const { return {bytes.data(), width, height, stride}; }
  decode::MutableImageView mutable_view() { return {bytes.data(), width, height, stride}; }
};

// A TestImage of uniform random pixels drawn from `seed` (the padding stays 0xEE).
TestImage Noise(uint32_t w, uint32_t h, uint64_t seed, size_t padding = 5);

// width x height RGB, interleaved, drawn from `seed`.
std::vector<uint8_t> PhotoLikePixels(uint32_t width, uint32_t height, uint64_t seed);

struct JpegOptions {
  int quality = 90;
  bool progressive = false;
  bool grayscale = false;     // one component
  bool subsample_420 = true;  // else 4:4:4
  unsigned restart_rows = 0;  // restart interval in MCU rows (0: none)
};

// Encodes RGB pixels (grayscale: their green channel) as a JPEG file's bytes.
std::string EncodeJpeg(const std::vector<uint8_t>& rgb, uint32_t width, uint32_t height,
                       const JpegOptions& options = {});

// Encodes RGB pixels as an 8-bit RGB PNG file's bytes.
std::string EncodePng(const std::vector<uint8_t>& rgb, uint32_t width, uint32_t height);

}  // namespace stoker::test
