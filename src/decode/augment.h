// Random augmentation parameters with torchvision's definitions, drawn deterministically.
//
// Every sample's parameters come from its own generator, seeded by (seed, epoch, sample index)
// (AugmentSeed), so a batch is reproducible whatever thread decodes it, and a resumed job draws
// exactly what the interrupted one would have. The draws follow torchvision's definitions
// (RandomResizedCrop.get_params, RandomHorizontalFlip, RandomRotation, RandomAffine's scale);
// the generator is stoker's PCG32, not torch's, so the values differ from torchvision's but
// their distributions are the same. Specified in docs/augment.md.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "common/random.h"
#include "decode/image.h"

namespace stoker::decode {

inline constexpr uint64_t kSaltAugment = 3;  // after the sampler's salts 1 and 2

// DeriveSeed({seed, epoch, sample, kSaltAugment}).
uint64_t AugmentSeed(uint64_t seed, uint64_t epoch, uint64_t sample);

struct RandomResizedCropOptions {
  double scale_min = 0.08, scale_max = 1.0;             // of the image area
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;  // width / height
};

// An integer crop (left, top, width, height) in source pixels.
struct CropRect {
  uint32_t x = 0, y = 0, width = 0, height = 0;
  Box box() const { return {double(x), double(y), double(x + width), double(y + height)}; }
};

// torchvision's RandomResizedCrop.get_params: up to 10 tries of (area fraction uniform in
// scale, log-aspect uniform in log(ratio)), w = round(sqrt(area * ratio)),
// h = round(sqrt(area / ratio)) (round half to even, as Python's round), accepted when it
// fits, at a uniform position; else the largest centred crop whose aspect is within ratio.
CropRect RandomResizedCropParams(uint32_t width, uint32_t height,
                                 const RandomResizedCropOptions& options, Pcg32& rng);

// torchvision's Resize(resize) then CenterCrop(crop_w x crop_h), as one source box: Resize
// scales the shorter side to `resize` (the longer one to int(resize * long / short)),
// CenterCrop takes the middle at offsets int(round((resized - crop) / 2)). Returns the box in
// source pixels that those output pixels cover; resampling that box of the source to
// crop_w x crop_h gives the same pixels as the two steps.
Box ResizeCenterCropBox(uint32_t width, uint32_t height, uint32_t resize, uint32_t crop_width,
                        uint32_t crop_height);

// Uniform in [lo, hi) from the generator (torch's uniform_ semantics).
inline double Uniform(Pcg32& rng, double lo, double hi) {
  return lo + (hi - lo) * rng.NextDouble();
}

// torch.rand(1) < p.
inline bool Bernoulli(Pcg32& rng, double p) { return rng.NextDouble() < p; }

}  // namespace stoker::decode
