#include "decode/transform.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

namespace stoker::decode {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// How far outside its box a resampling filter reads, in source pixels, when the box is resized
// by `scale` source pixels per output pixel (the filter's support widens when downscaling).
double FilterReach(Interpolation interpolation, double scale) {
  const double support = interpolation == Interpolation::kBicubic    ? 2.0
                         : interpolation == Interpolation::kBilinear ? 1.0
                                                                     : 0.5;
  return support * std::max(scale, 1.0) + 1.0;
}

}  // namespace

Status TransformOptions::Validate() const {
  if (output.width == 0 || output.height == 0) {
    return Status::InvalidArgument("the output size must be at least 1x1");
  }
  // The default bounds of an input image (not the options' max_pixels: a small one may be
  // upscaled): an output larger is a mistake, and its batches would not fit in memory.
  constexpr DecodeLimits kImage;
  if (output.width > kImage.max_dimension || output.height > kImage.max_dimension ||
      uint64_t{output.width} * output.height > kImage.max_pixels) {
    return Status::InvalidArgument(
        fmt::format("size {}x{} is larger than an image may be ({} pixels, each side at most {})",
                    output.height, output.width, kImage.max_pixels, kImage.max_dimension));
  }
  if (!(crop.scale_min > 0 && crop.scale_min <= crop.scale_max && crop.scale_max <= 1)) {
    return Status::InvalidArgument(fmt::format(
        "scale must satisfy 0 < min <= max <= 1, not ({}, {})", crop.scale_min, crop.scale_max));
  }
  if (!(crop.ratio_min > 0 && crop.ratio_min <= crop.ratio_max)) {
    return Status::InvalidArgument(fmt::format("ratio must satisfy 0 < min <= max, not ({}, {})",
                                               crop.ratio_min, crop.ratio_max));
  }
  if (!(flip_probability >= 0 && flip_probability <= 1)) {
    return Status::InvalidArgument("the flip probability must be in [0, 1]");
  }
  if (!(rotation_degrees >= 0 && rotation_degrees <= 180)) {
    return Status::InvalidArgument("rotation must be in [0, 180] degrees");
  }
  if (!(zoom_min > 0 && zoom_min <= zoom_max)) {
    return Status::InvalidArgument("zoom must satisfy 0 < min <= max");
  }
  if (const uint32_t r = ResizeFor(*this);
      !train && center_crop && r < std::max(output.width, output.height)) {
    return Status::InvalidArgument(fmt::format("resize ({}) must be at least the crop size ({}x{})",
                                               r, output.width, output.height));
  }
  for (int c = 0; c < 3; ++c) {
    if (!(output.std[c] != 0 && std::isfinite(output.std[c]) && std::isfinite(output.mean[c]))) {
      return Status::InvalidArgument("std must be finite and non-zero, mean finite");
    }
  }
  return Status::OK();
}

uint32_t ResizeFor(const TransformOptions& options) {
  if (options.resize != 0) return options.resize;
  const uint32_t side = std::max(options.output.width, options.output.height);
  return static_cast<uint32_t>(std::lround(side * 8.0 / 7.0));
}

SampleParams ChooseParams(const TransformOptions& options, uint32_t width, uint32_t height,
                          uint64_t sample_seed) {
  SampleParams params;
  if (!options.train && !options.center_crop) {
    params.box = {0, 0, double(width), double(height)};
    params.clip_to_box = false;
    return params;
  }
  if (!options.train) {
    params.box = ResizeCenterCropBox(width, height, ResizeFor(options), options.output.width,
                                     options.output.height);
    params.clip_to_box = false;
    return params;
  }
  // The order of draws is part of the specification (docs/augment.md): crop, flip, angle, zoom.
  Pcg32 rng(sample_seed);
  params.box = RandomResizedCropParams(width, height, options.crop, rng).box();
  params.flip = Bernoulli(rng, options.flip_probability);
  if (options.rotation_degrees > 0) {
    params.angle = Uniform(rng, -options.rotation_degrees, options.rotation_degrees);
  }
  if (options.zoom_min != 1 || options.zoom_max != 1) {
    params.zoom = Uniform(rng, options.zoom_min, options.zoom_max);
  }
  return params;
}

PixelBounds ResampledRegion(uint32_t width, uint32_t height, const SampleParams& params,
                            Interpolation interpolation, uint32_t out_width, uint32_t out_height) {
  const Box& box = params.box;
  double reach_x = 0, reach_y = 0;
  if (!params.clip_to_box) {
    reach_x = FilterReach(interpolation, box.width() / out_width);
    reach_y = FilterReach(interpolation, box.height() / out_height);
  }
  const auto lo = [](double v, double reach) {
    return static_cast<uint32_t>(std::max(0.0, std::floor(v - reach)));
  };
  const auto hi = [](double v, double reach, uint32_t limit) {
    return static_cast<uint32_t>(std::min(double(limit), std::ceil(v + reach)));
  };
  return {lo(box.x0, reach_x), lo(box.y0, reach_y), hi(box.x1, reach_x, width),
          hi(box.y1, reach_y, height)};
}

PixelBounds ClippedView(const Box& box, uint32_t width, uint32_t height) {
  // The epsilons keep a box edge that rounding put a hair past a pixel boundary from taking in
  // a whole extra pixel.
  const auto left =
      static_cast<uint32_t>(std::clamp(std::floor(box.x0 + 1e-6), 0.0, double(width - 1)));
  const auto top =
      static_cast<uint32_t>(std::clamp(std::floor(box.y0 + 1e-6), 0.0, double(height - 1)));
  const auto right =
      static_cast<uint32_t>(std::clamp(std::ceil(box.x1 - 1e-6), double(left + 1), double(width)));
  const auto bottom =
      static_cast<uint32_t>(std::clamp(std::ceil(box.y1 - 1e-6), double(top + 1), double(height)));
  return {left, top, right, bottom};
}

Transformer::Transformer(const TransformOptions& options) : options_(options) {}

Status Transformer::Run(std::span<const std::byte> bytes, uint64_t sample_seed, void* dst) {
  const OutputSpec& out = options_.output;
  Clock::time_point start = Clock::now();
  STOKER_ASSIGN_OR_RETURN(const ImageInfo info, decoder_.ReadInfo(bytes, options_.limits));
  const SampleParams params = ChooseParams(options_, info.width, info.height, sample_seed);

  const Box& box = params.box;
  const PixelBounds needed = ResampledRegion(info.width, info.height, params,
                                             options_.interpolation, out.width, out.height);
  const uint32_t region_width = needed.x1 - needed.x0, region_height = needed.y1 - needed.y0;
  DecodeRequest request;
  request.limits = options_.limits;
  request.region = {needed.x0, needed.y0, region_width, region_height};
  if (options_.dct_scaling) {
    // Scaled down, the box must still cover the output: the region is larger than the box by
    // the same factor.
    request.min_width = static_cast<uint32_t>(
        std::ceil(double(out.width) * region_width / std::max(box.width(), 1e-9)));
    request.min_height = static_cast<uint32_t>(
        std::ceil(double(out.height) * region_height / std::max(box.height(), 1e-9)));
  }
  STOKER_ASSIGN_OR_RETURN(const DecodedRegion region, decoder_.Decode(bytes, request, decoded_));
  timings_.decode += SecondsSince(start);
  start = Clock::now();

  // The box in decoded pixels; when clipping, a view of just the pixels it touches, so the
  // filter finds nothing beyond it (as after PIL's crop).
  Box image_box = region.ToImage(box);
  ImageView source = decoded_.view();
  if (params.clip_to_box) {
    const PixelBounds v = ClippedView(image_box, source.width, source.height);
    source = {source.row(v.y0) + size_t{v.x0} * kChannels, v.x1 - v.x0, v.y1 - v.y0, source.stride};
    image_box = {image_box.x0 - v.x0, image_box.y0 - v.y0, image_box.x1 - v.x0,
                 image_box.y1 - v.y0};
  }
  resized_.Reset(out.width, out.height);
  resizer_.Resize(source, image_box, options_.interpolation, resized_.mutable_view());
  ImageView result = resized_.view();
  if (params.angle != 0 || params.zoom != 1) {
    WarpParams warp;
    warp.angle_degrees = params.angle;
    warp.zoom = params.zoom;
    warp.interpolation = options_.warp_interpolation;
    warped_.Reset(out.width, out.height);
    Warp(result, warp, warped_.mutable_view());
    result = warped_.view();
  }
  timings_.resize += SecondsSince(start);
  start = Clock::now();
  WriteSample(result, params.flip, out, dst);
  timings_.output += SecondsSince(start);
  ++timings_.samples;
  return Status::OK();
}

}  // namespace stoker::decode
