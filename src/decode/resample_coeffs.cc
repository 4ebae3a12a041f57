// See resample_coeffs.h. Pillow's arithmetic, expression for expression: the coefficients are
// rounded to 22 bits, so a rearranged formula could move a rounding and change a pixel.
#include "decode/resample_coeffs.h"

#include <algorithm>
#include <cmath>

namespace stoker::decode {
namespace {

struct Filter {
  double (*weight)(double);
  double support;
};

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

// Clamps a coordinate into [0, limit]; NaN becomes 0.
float ClampCoord(double v, uint32_t limit) {
  if (!(v > 0)) return 0.0f;
  return static_cast<float>(std::min(v, double(limit)));
}

}  // namespace

void PlanAxis(int in_size, float in0, float in1, int out_size, Interpolation interpolation,
              AxisPlan& plan) {
  const Filter filter = interpolation == Interpolation::kBicubic ? Filter{CubicWeight, 2.0}
                                                                 : Filter{TriangleWeight, 1.0};
  const double scale = static_cast<double>(in1 - in0) / out_size;
  const double filter_scale = std::max(scale, 1.0);  // widen the filter when shrinking
  const double support = filter.support * filter_scale;
  const double inv_filter_scale = 1.0 / filter_scale;
  plan.stride = static_cast<int>(std::ceil(support)) * 2 + 1;
  plan.max_taps = 0;
  plan.start.resize(out_size);
  plan.taps.resize(out_size);
  plan.coefs.assign(size_t(out_size) * plan.stride, 0);
  plan.weights.resize(plan.stride);
  for (int i = 0; i < out_size; ++i) {
    const double center = in0 + (i + 0.5) * scale;
    const int lo = std::max(static_cast<int>(std::floor(center - support + 0.5)), 0);
    const int hi = std::min(static_cast<int>(std::floor(center + support + 0.5)), in_size);
    const int n = std::max(hi - lo, 0);
    double total = 0.0;
    for (int k = 0; k < n; ++k) {
      const double w = filter.weight((k + lo - center + 0.5) * inv_filter_scale);
      plan.weights[k] = w;
      total += w;
    }
    int32_t* coefs = &plan.coefs[size_t(i) * plan.stride];
    for (int k = 0; k < n; ++k) {
      double w = plan.weights[k];
      if (total != 0.0) w /= total;
      coefs[k] = static_cast<int32_t>(w < 0 ? -0.5 + w * (1 << kPrecisionBits)
                                            : 0.5 + w * (1 << kPrecisionBits));
    }
    plan.start[i] = lo;
    plan.taps[i] = n;
    plan.max_taps = std::max(plan.max_taps, n);
  }
}

AxisSpan RebaseToSpan(AxisPlan& plan) {
  const size_t last = plan.start.size() - 1;
  const AxisSpan span{plan.start[0], plan.start[last] + plan.taps[last]};
  for (int32_t& s : plan.start) s -= span.first;
  return span;
}

FloatBox ClampBox(const Box& box, uint32_t width, uint32_t height) {
  FloatBox b;
  b.x0 = ClampCoord(box.x0, width);
  b.y0 = ClampCoord(box.y0, height);
  b.x1 = std::max(ClampCoord(box.x1, width), b.x0);
  b.y1 = std::max(ClampCoord(box.y1, height), b.y0);
  return b;
}

bool VerticalFirst(int64_t in_width, int64_t in_height, int64_t out_width, int64_t out_height) {
  const int64_t shrink_h = in_height - out_height, shrink_w = in_width - out_width;
  return shrink_h > 0 && shrink_h > shrink_w * 2;
}

}  // namespace stoker::decode
