// See resample_plan.h. The coefficients and the region come from the functions the CPU path
// runs (resample_coeffs.h, transform.h); what is here is only what the GPU adds to them.
#include "decode/cuda/resample_plan.h"

#include <algorithm>

namespace stoker::decode::cuda {
namespace {

// The kernels (gpu_kernels.h, compiled without stoker's C++23 headers) keep their own copy.
static_assert(kPrecisionBits == decode::kPrecisionBits);

constexpr uint32_t kRoiAlign = 16;  // the largest JPEG iMCU (4:2:0) is 16x16

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
  const FloatBox b = ClampBox(box, src_width, src_height);
  ResamplePlan plan;
  PlanAxis(int(src_width), b.x0, b.x1, int(out_width), interpolation, plan.horizontal);
  PlanAxis(int(src_height), b.y0, b.y1, int(out_height), interpolation, plan.vertical);
  // As Resizer: only the rows and columns some window touches are resampled.
  const AxisSpan cols = RebaseToSpan(plan.horizontal), rows = RebaseToSpan(plan.vertical);
  plan.first_col = uint32_t(cols.first);
  plan.cols = uint32_t(cols.end - cols.first);
  plan.first_row = uint32_t(rows.first);
  plan.rows = uint32_t(rows.end - rows.first);
  plan.vertical_first = VerticalFirst(src_width, src_height, out_width, out_height);
  return plan;
}

SampleGeometry PlanGeometry(uint32_t width, uint32_t height, const SampleParams& params,
                            Interpolation interpolation, uint32_t out_width, uint32_t out_height) {
  PixelBounds r = ResampledRegion(width, height, params, interpolation, out_width, out_height);
  if (r.x1 <= r.x0 || r.y1 <= r.y0) {  // an empty region asks the CPU decoder for the whole image
    r = {0, 0, width, height};
  }
  WidenToBlocks(r.x0, r.x1, width);
  WidenToBlocks(r.y0, r.y1, height);

  SampleGeometry g;
  g.roi = {r.x0, r.y0, r.x1 - r.x0, r.y1 - r.y0};
  g.view = {0, 0, g.roi.width, g.roi.height};
  const Box& box = params.box;
  g.box = {box.x0 - r.x0, box.y0 - r.y0, box.x1 - r.x0, box.y1 - r.y0};
  if (params.clip_to_box) {
    const PixelBounds v = ClippedView(g.box, g.roi.width, g.roi.height);
    g.view = {v.x0, v.y0, v.x1 - v.x0, v.y1 - v.y0};
    g.box = {g.box.x0 - v.x0, g.box.y0 - v.y0, g.box.x1 - v.x0, g.box.y1 - v.y0};
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
