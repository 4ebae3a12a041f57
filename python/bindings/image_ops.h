// stoker._core.image: single-image decode / resize / warp (see image_ops.cc).
#pragma once

#include <nanobind/nanobind.h>

namespace stoker::python {
void RegisterImageOps(nanobind::module_& m);
}  // namespace stoker::python
