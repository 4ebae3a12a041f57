// Host-side planning for the GPU path: which part of a JPEG to decode for a sample, and the
// resampling coefficients — computed by the CPU path's own functions (decode::Transformer's
// ResampledRegion and ClippedView for the geometry, decode::Resizer's PlanAxis for the
// coefficients), so that the GPU's pixels differ from the CPU's only where nvJPEG's decoded
// pixels differ from libjpeg-turbo's.
//
// Plain C++ (no CUDA): the coefficients are cheap (one window per output row and column) and
// are uploaded with the batch. Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "decode/cuda/gpu_kernels.h"
#include "decode/image.h"
#include "decode/output.h"
#include "decode/resample_coeffs.h"
#include "decode/resize.h"
#include "decode/transform.h"

namespace stoker::decode::cuda {

struct ResamplePlan {
  AxisPlan horizontal, vertical;  // decode::Resizer's own (resample_coeffs.h)
  // The source columns and rows some window touches; the window starts above are relative to
  // (first_col, first_row).
  uint32_t first_col = 0, first_row = 0, cols = 0, rows = 0;
  // Pillow's pass order (decode::Resizer follows it): vertical first when the height shrinks
  // by more than twice as many pixels as the width. The order changes the intermediate
  // rounding, so it is part of matching.
  bool vertical_first = false;
  // The intermediate image between the passes.
  uint32_t temp_width(uint32_t out_width) const { return vertical_first ? cols : out_width; }
  uint32_t temp_height(uint32_t out_height) const { return vertical_first ? out_height : rows; }
};

// Pillow's coefficients for resampling `box` (clamped to the source, and rounded to float as
// Pillow takes it) of a src_width x src_height image to out_width x out_height. Requires
// non-empty source and output, and kBilinear or kBicubic.
ResamplePlan PlanResample(uint32_t src_width, uint32_t src_height, const Box& box,
                          Interpolation interpolation, uint32_t out_width, uint32_t out_height);

using PixelRect = DecodeRequest::Rect;

// Where one sample's pixels come from.
struct SampleGeometry {
  PixelRect roi;   // in source pixels: the region to decode
  PixelRect view;  // in ROI pixels: what the resampler reads (all of the ROI, or only the
                   // pixels the box touches when the sample clips to its box)
  Box box;         // the sample's box in view pixels
};

// The geometry decode::Transformer uses with dct_scaling off (ResampledRegion, ClippedView),
// except that the ROI is widened to 16-pixel boundaries plus one 16-pixel margin (clamped to the
// image), so that the pixels the resampler reads never lie on a ROI edge, where a decoder's
// chroma upsampling lacks its neighbours. width x height: the image; out: the output size.
SampleGeometry PlanGeometry(uint32_t width, uint32_t height, const SampleParams& params,
                            Interpolation interpolation, uint32_t out_width, uint32_t out_height);

// The kernels' view of `spec`, with decode/output.cc's float scale and bias.
OutputFormat FormatFor(const OutputSpec& spec);

}  // namespace stoker::decode::cuda
