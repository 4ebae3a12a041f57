// Pillow's resampling coefficients (precompute_coeffs + normalize_coeffs_8bpc), written once for
// decode::Resizer and for the GPU path's planner (cuda/resample_plan.h): both must resample with
// the very same windows and 22-bit weights for their pixels to agree value for value.
//
// Host code only (nvcc compiles no stoker header that needs C++23; the kernels take the arrays
// built here). Thread-safety: pure functions; an AxisPlan belongs to one thread.
#pragma once

#include <cstdint>
#include <vector>

#include "decode/image.h"
#include "decode/resize.h"

namespace stoker::decode {

// Pillow's fixed point: 8 bits of result plus 2 bits of headroom for filters with negative lobes
// leaves 22 fractional bits in an int32 accumulator.
inline constexpr int kPrecisionBits = 22;

// How one axis is resampled: for output index i, taps[i] source indices from start[i], weighted
// by coefs[i * stride ...].
struct AxisPlan {
  int stride = 0;    // coefficients per output index (Pillow's ksize)
  int max_taps = 0;  // the widest window actually used
  std::vector<int32_t> start, taps, coefs;
  std::vector<double> weights;  // scratch for one window, kept to reuse its allocation
};

// Plans resampling [in0, in1) of an axis of in_size pixels to out_size (>= 1) pixels with
// kBilinear or kBicubic. `in0`/`in1` are floats because Pillow receives the box as floats: the
// scale comes from their float difference.
void PlanAxis(int in_size, float in0, float in1, int out_size, Interpolation interpolation,
              AxisPlan& plan);

// The source indices [first, end) that some window of `plan` touches; rebases plan.start to be
// relative to `first`. Windows move right (down) monotonically, so the first and last bound them.
struct AxisSpan {
  int first = 0, end = 0;
};
AxisSpan RebaseToSpan(AxisPlan& plan);

// `box` clamped into a width x height image (NaN to 0, the far edges no smaller than the near
// ones) and rounded to float, as Pillow takes it.
struct FloatBox {
  float x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};
FloatBox ClampBox(const Box& box, uint32_t width, uint32_t height);

// Pillow (since 13.0) runs the vertical pass first when the height shrinks by more than twice
// as many pixels as the width, counted on the whole source image. The order changes the
// rounding of the intermediate image, so it is part of being exact.
bool VerticalFirst(int64_t in_width, int64_t in_height, int64_t out_width, int64_t out_height);

}  // namespace stoker::decode
