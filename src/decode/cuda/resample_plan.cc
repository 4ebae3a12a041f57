// See resample_plan.h. The expressions follow decode/resize.cc and decode/transform.cc one for
// one: a rearranged formula could move a coefficient's rounding and change a pixel.
#include "decode/cuda/resample_plan.h"

#include <algorithm>
#include <cmath>

namespace stoker::decode::cuda {
namespace {

constexpr int kPrecisionBits = 22;
constexpr uint32_t kRoiAlign = 16;  // the largest JPEG iMCU (4:2:0) is 16x16

double TriangleWeight(double x) {
  if (x < 0.0) x = -x;
  if (x < 1.0) return 1.0 - x;
  return 0.0;
}

double CubicWeight(double x) {  // Keys' cubic convolution with a = -0.5
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

// Pillow's precompute_coeffs + normalize_coeffs_8bpc (as Resizer's PlanAxis).
void PlanAxis(int in_size, float in0, float in1, int out_size, bool cubic, AxisPlan& plan) {
  const double filter_support = cubic ? 2.0 : 1.0;
  const double scale = static_cast<double>(in1 - in0) / out_size;
  const double filter_scale = std::max(scale, 1.0);
  const double support = filter_support * filter_scale;
  const double inv_filter_scale = 1.0 / filter_scale;
  plan.stride = static_cast<int>(std::ceil(support)) * 2 + 1;
  plan.start.assign(out_size, 0);
  plan.taps.assign(out_size, 0);
  plan.coefs.assign(size_t(out_size) * plan.stride, 0);
  std::vector<double> weights(plan.stride);
  for (int i = 0; i < out_size; ++i) {
    const double center = in0 + (i + 0.5) * scale;
    const int lo = std::max(static_cast<int>(center - support + 0.5), 0);
    const int hi = std::min(static_cast<int>(center + support + 0.5), in_size);
    const int n = std::max(hi - lo, 0);
    double total = 0.0;
    for (int k = 0; k < n; ++k) {
      const double x = (k + lo - center + 0.5) * inv_filter_scale;
      weights[k] = cubic ? CubicWeight(x) : TriangleWeight(x);
      total += weights[k];
    }
    int32_t* coefs = &plan.coefs[size_t(i) * plan.stride];
    for (int k = 0; k < n; ++k) {
      double w = weights[k];
      if (total != 0.0) w /= total;
      coefs[k] = static_cast<int32_t>(w < 0 ? -0.5 + w * (1 << kPrecisionBits)
                                            : 0.5 + w * (1 << kPrecisionBits));
    }
    plan.start[i] = lo;
    plan.taps[i] = n;
  }
}

// Resizer's ClampCoord: into [0, limit], NaN to 0.
float ClampCoord(double v, uint32_t limit) {
  if (!(v > 0)) return 0.0f;
  return static_cast<float>(std::min(v, double(limit)));
}

// transform.cc's FilterReach.
double FilterReach(Interpolation interpolation, double scale) {
  const double support = interpolation == Interpolation::kBicubic    ? 2.0
                         : interpolation == Interpolation::kBilinear ? 1.0
                                                                      : 0.5;
  return support * std::max(scale, 1.0) + 1.0;
}

// [lo, hi) widened to kRoiAlign boundaries plus one kRoiAlign margin, within [0, limit].
void WidenToBlocks(uint32_t& lo, uint32_t& hi, uint32_t limit) {
  lo = lo / kRoiAlign * kRoiAlign;
  lo = lo >= kRoiAlign ? lo - kRoiAlign : 0;
  const uint64_t widened = (uint64_t{hi} + kRoiAlign - 1) / kRoiAlign * kRoiAlign + kRoiAlign;
  hi = static_cast<uint32_t>(std::min<uint64_t>(limit, widened));
}

}  // namespace

ResamplePlan PlanResample(uint32_t src_width, uint32_t src_height, const Box& box,
                          Interpolation interpolation, uint32_t out_width, uint32_t out_height) {
  const float x0 = ClampCoord(box.x0, src_width), y0 = ClampCoord(box.y0, src_height);
  const float x1 = std::max(ClampCoord(box.x1, src_width), x0);
  const float y1 = std::max(ClampCoord(box.y1, src_height), y0);
  const bool cubic = interpolation == Interpolation::kBicubic;
  ResamplePlan plan;
  PlanAxis(int(src_width), x0, x1, int(out_width), cubic, plan.horizontal);
  PlanAxis(int(src_height), y0, y1, int(out_height), cubic, plan.vertical);
  // Resizer resamples only the rows and columns some window touches; windows move right (down)
  // monotonically, so the first and last windows bound them.
  const auto bounds = [](AxisPlan& axis, uint32_t& first, uint32_t& count) {
    const size_t last = axis.start.size() - 1;
    const int32_t begin = axis.start[0];
    const int32_t end = std::max(axis.start[last] + axis.taps[last], begin);
    for (int32_t& s : axis.start) s -= begin;
    first = uint32_t(begin);
    count = uint32_t(end - begin);
  };
  bounds(plan.horizontal, plan.first_col, plan.cols);
  bounds(plan.vertical, plan.first_row, plan.rows);
  // Resizer's VerticalFirst, on the dimensions of the image it resamples.
  const int64_t shrink_h = int64_t{src_height} - out_height;
  const int64_t shrink_w = int64_t{src_width} - out_width;
  plan.vertical_first = shrink_h > 0 && shrink_h > shrink_w * 2;
  return plan;
}

SampleGeometry PlanGeometry(uint32_t width, uint32_t height, const SampleParams& params,
                            Interpolation interpolation, uint32_t out_width,
                            uint32_t out_height) {
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
  uint32_t x0 = lo(box.x0, reach_x), y0 = lo(box.y0, reach_y);
  uint32_t x1 = hi(box.x1, reach_x, width), y1 = hi(box.y1, reach_y, height);
  if (x1 <= x0 || y1 <= y0) {  // an empty region asks the CPU decoder for the whole image
    x0 = y0 = 0;
    x1 = width;
    y1 = height;
  }
  WidenToBlocks(x0, x1, width);
  WidenToBlocks(y0, y1, height);

  SampleGeometry g;
  g.roi = {x0, y0, x1 - x0, y1 - y0};
  g.view = {0, 0, g.roi.width, g.roi.height};
  g.box = {box.x0 - x0, box.y0 - y0, box.x1 - x0, box.y1 - y0};
  if (params.clip_to_box) {
    // As Transformer: only the pixels the box touches, so the filter finds nothing beyond it.
    const uint32_t w = g.roi.width, h = g.roi.height;
    const auto left =
        static_cast<uint32_t>(std::clamp(std::floor(g.box.x0 + 1e-6), 0.0, double(w - 1)));
    const auto top =
        static_cast<uint32_t>(std::clamp(std::floor(g.box.y0 + 1e-6), 0.0, double(h - 1)));
    const auto right = static_cast<uint32_t>(
        std::clamp(std::ceil(g.box.x1 - 1e-6), double(left + 1), double(w)));
    const auto bottom = static_cast<uint32_t>(
        std::clamp(std::ceil(g.box.y1 - 1e-6), double(top + 1), double(h)));
    g.view = {left, top, right - left, bottom - top};
    g.box = {g.box.x0 - left, g.box.y0 - top, g.box.x1 - left, g.box.y1 - top};
  }
  return g;
}

OutputFormat FormatFor(const OutputSpec& spec) {
  OutputFormat f;
  f.width = spec.width;
  f.height = spec.height;
  f.float32 = spec.dtype == DType::kFloat32;
  f.nchw = spec.layout == Layout::kNCHW;
  for (int c = 0; c < 3; ++c) {  // output.cc's expressions, in float
    f.scale[c] = 1.0f / (255.0f * spec.std[c]);
    f.bias[c] = -spec.mean[c] / spec.std[c];
  }
  return f;
}

}  // namespace stoker::decode::cuda
