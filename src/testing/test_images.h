// Test images: seeded photo-like pixels (smooth gradients, edges and noise, so JPEG behaves as
// on real photos rather than on flat colour) and encoders to JPEG (libjpeg) and PNG (libpng).
// Not thread-safe: each test builds its own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stoker::test {

// width x height RGB, interleaved, drawn from `seed`.
std::vector<uint8_t> PhotoLikePixels(uint32_t width, uint32_t height, uint64_t seed);

struct JpegOptions {
  int quality = 90;
  bool progressive = false;
  bool grayscale = false;      // one component
  bool subsample_420 = true;   // else 4:4:4
  unsigned restart_rows = 0;   // restart interval in MCU rows (0: none)
};

// Encodes RGB pixels (grayscale: their green channel) as a JPEG file's bytes.
std::string EncodeJpeg(const std::vector<uint8_t>& rgb, uint32_t width, uint32_t height,
                       const JpegOptions& options = {});

// Encodes RGB pixels as an 8-bit RGB PNG file's bytes.
std::string EncodePng(const std::vector<uint8_t>& rgb, uint32_t width, uint32_t height);

}  // namespace stoker::test
