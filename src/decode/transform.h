// One sample's way from encoded bytes to its slot in a batch: decode only what the crop needs,
// resample crop and resize in one pass, optionally rotate/zoom, flip, and write uint8 or
// normalized float in the batch's layout.
//
// Training (torchvision's RandomResizedCrop + RandomHorizontalFlip [+ RandomRotation,
// RandomAffine(scale)] + ToTensor + Normalize) draws its parameters from the sample's own seed
// (augment.h); validation is Resize(resize) + CenterCrop(size) + ToTensor + Normalize, or with
// center_crop off Resize((height, width)) of the whole image (ray.data.read_images' way). The
// decode is asked for the crop's region (region-of-interest decode) and, when dct_scaling is on,
// at the smallest libjpeg scale that still leaves at least the output size — so the pixels equal
// torchvision's exactly with dct_scaling off, and nearly (a better-filtered downscale) with it on.
//
// Thread-safety: one Transformer per thread; it reuses its buffers from sample to sample.
#pragma once

#include <cstdint>
#include <span>

#include "decode/augment.h"
#include "decode/decoder.h"
#include "decode/output.h"
#include "decode/resize.h"
#include "decode/warp.h"
#include "stoker/status.h"

namespace stoker::decode {

struct TransformOptions {
  bool train = true;
  RandomResizedCropOptions crop;      // train
  double flip_probability = 0.5;      // train
  double rotation_degrees = 0;        // train: angle uniform in [-d, d]; 0 = off
  double zoom_min = 1, zoom_max = 1;  // train: zoom uniform in [min, max]; 1, 1 = off
  uint32_t resize = 0;      // validation: shorter side before the centre crop; 0: size * 8 / 7
                            // (256 for 224, ImageNet's convention), see ResizeFor
  bool center_crop = true;  // validation: Resize(resize) + CenterCrop(size); false: the whole
                            // image resized to the output size (torchvision's Resize((h, w)))
  Interpolation interpolation = Interpolation::kBilinear;
  Interpolation warp_interpolation = Interpolation::kNearest;  // torchvision's default
  bool dct_scaling = true;
  DecodeLimits limits;
  OutputSpec output;  // size, dtype, layout, mean/std
  Status Validate() const;
};

// What one sample gets: a source box resampled to the output size, then the rest.
struct SampleParams {
  Box box;                  // in source pixels
  bool clip_to_box = true;  // resample only pixels inside the box (a crop first, as
                            // RandomResizedCrop does); false: neighbours outside count, as
                            // when Resize runs on the whole image before CenterCrop
  bool flip = false;
  double angle = 0, zoom = 1;
};

// Validation's shorter side before the centre crop: options.resize, or when that is 0 the
// larger output side * 8 / 7, rounded.
uint32_t ResizeFor(const TransformOptions& options);

// The parameters for an image of width x height: drawn from `sample_seed` when training.
SampleParams ChooseParams(const TransformOptions& options, uint32_t width, uint32_t height,
                          uint64_t sample_seed);

// A rectangle of source pixels: [x0, x1) x [y0, y1).
struct PixelBounds {
  uint32_t x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

// The pixels of a width x height image that resampling `params.box` to out_width x out_height
// reads: the box, plus the filter's reach beyond it when neighbours outside the box count
// (clip_to_box off), clamped to the image. Empty (x1 <= x0 or y1 <= y0) only for a box outside
// the image. The GPU path (cuda/resample_plan.h) decodes from the same region.
PixelBounds ResampledRegion(uint32_t width, uint32_t height, const SampleParams& params,
                            Interpolation interpolation, uint32_t out_width, uint32_t out_height);

// For a sample that clips to its box: the pixels of a width x height image (both >= 1) that
// `box` touches, at least one. The resampler reads only these, so that the filter finds nothing
// beyond the box (as after PIL's crop).
PixelBounds ClippedView(const Box& box, uint32_t width, uint32_t height);

// Where a Transformer's time went (seconds, summed over the samples it ran).
struct TransformTimings {
  double decode = 0, resize = 0, output = 0;
  uint64_t samples = 0;
};

class Transformer {
 public:
  explicit Transformer(const TransformOptions& options);

  // Decodes `bytes`, transforms them with the parameters of `sample_seed` and writes the result
  // (options.output.sample_bytes() bytes) to `dst`. On error `dst` may be partly written; the
  // Status says why (it does not name the sample: the caller knows it).
  Status Run(std::span<const std::byte> bytes, uint64_t sample_seed, void* dst);

  const TransformTimings& timings() const { return timings_; }

 private:
  TransformOptions options_;
  Decoder decoder_;
  Resizer resizer_;
  Image decoded_, resized_, warped_;
  TransformTimings timings_;
};

}  // namespace stoker::decode
