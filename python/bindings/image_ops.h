// stoker._core.image: single-image decode / resize / warp (see image_ops.cc).
#pragma once

#include <string>

#include <nanobind/nanobind.h>

#include "decode/resize.h"

namespace stoker::python {
void RegisterImageOps(nanobind::module_& m);

// "nearest" | "bilinear" | "bicubic"; ValueError otherwise. Shared with image_pipeline.cc.
decode::Interpolation ParseInterpolation(const std::string& name);
}  // namespace stoker::python
