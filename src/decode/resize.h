// Resampling with Pillow's semantics (what torchvision's PIL transforms do): a separable
// convolution whose filter support widens with the downscale factor (antialiasing), sampled at
// pixel centres, over a floating-point source box — so crop and resize are one pass, and a crop
// that DCT scaling put between pixels is still exact.
//
// Results equal PIL's Image.resize(size, filter, box) (Pillow >= 13) value for value
// (tests/python/test_transform_pixels.py).
// Thread-safety: use one Resizer per thread (it keeps coefficient and row buffers).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "decode/image.h"

namespace stoker::decode {

enum class Interpolation : uint8_t { kNearest, kBilinear, kBicubic };

// "nearest", "bilinear", "bicubic" (PIL's and torchvision's names) and back.
std::optional<Interpolation> ParseInterpolation(std::string_view name);
std::string_view InterpolationName(Interpolation interpolation);

class Resizer {
 public:
  Resizer();
  ~Resizer();
  // Resamples `box` of `src` (clamped to the image) to fill `dst` entirely.
  void Resize(ImageView src, const Box& box, Interpolation interpolation, MutableImageView dst);

 private:
  struct Buffers;
  std::unique_ptr<Buffers> buffers_;
};

}  // namespace stoker::decode
