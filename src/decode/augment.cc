#include "decode/augment.h"

#include <algorithm>
#include <cmath>

namespace stoker::decode {
namespace {

// Python's round(): to nearest, ties to even (std::nearbyint in the default rounding mode).
int64_t RoundHalfEven(double v) { return static_cast<int64_t>(std::nearbyint(v)); }

}  // namespace

uint64_t AugmentSeed(uint64_t seed, uint64_t epoch, uint64_t sample) {
  return DeriveSeed({seed, epoch, sample, kSaltAugment});
}

CropRect RandomResizedCropParams(uint32_t width, uint32_t height,
                                 const RandomResizedCropOptions& options, Pcg32& rng) {
  const double area = double(width) * double(height);
  const double log_ratio_min = std::log(options.ratio_min);
  const double log_ratio_max = std::log(options.ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * Uniform(rng, options.scale_min, options.scale_max);
    const double aspect = std::exp(Uniform(rng, log_ratio_min, log_ratio_max));
    const int64_t w = RoundHalfEven(std::sqrt(target_area * aspect));
    const int64_t h = RoundHalfEven(std::sqrt(target_area / aspect));
    if (w > 0 && w <= int64_t{width} && h > 0 && h <= int64_t{height}) {
      // torch.randint(0, n + 1): uniform over 0..n.
      const auto y = static_cast<uint32_t>(rng.Below(uint64_t(height - h) + 1));
      const auto x = static_cast<uint32_t>(rng.Below(uint64_t(width - w) + 1));
      return {x, y, static_cast<uint32_t>(w), static_cast<uint32_t>(h)};
    }
  }
  // Fallback: the whole image, trimmed to the nearest allowed aspect ratio, centred.
  const double in_ratio = double(width) / double(height);
  int64_t w = width, h = height;
  if (in_ratio < options.ratio_min) {
    h = RoundHalfEven(double(w) / options.ratio_min);
  } else if (in_ratio > options.ratio_max) {
    w = RoundHalfEven(double(h) * options.ratio_max);
  }
  w = std::clamp<int64_t>(w, 1, width);
  h = std::clamp<int64_t>(h, 1, height);
  return {static_cast<uint32_t>((width - w) / 2), static_cast<uint32_t>((height - h) / 2),
          static_cast<uint32_t>(w), static_cast<uint32_t>(h)};
}

Box ResizeCenterCropBox(uint32_t width, uint32_t height, uint32_t resize, uint32_t crop_width,
                        uint32_t crop_height) {
  // torchvision's _compute_resized_output_size for an int size: the shorter side becomes
  // `resize`, the longer int(resize * long / short) (truncated).
  // Python computes resize * long exactly, then a correctly rounded division, then int().
  const auto scaled_long = [resize](uint32_t longer, uint32_t shorter) {
    return static_cast<uint32_t>(double(uint64_t{resize} * longer) / double(shorter));
  };
  uint32_t resized_w = resize, resized_h = resize;
  if (width <= height) {
    resized_h = scaled_long(height, width);
  } else {
    resized_w = scaled_long(width, height);
  }
  const double left = double(RoundHalfEven((double(resized_w) - crop_width) / 2.0));
  const double top = double(RoundHalfEven((double(resized_h) - crop_height) / 2.0));
  const double sx = double(width) / resized_w, sy = double(height) / resized_h;
  return {left * sx, top * sy, (left + crop_width) * sx, (top + crop_height) * sy};
}

}  // namespace stoker::decode
