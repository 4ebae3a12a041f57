// stoker._core.ImagePipeline: batches of decoded, transformed images (see image_pipeline.cc).
#pragma once

#include <nanobind/nanobind.h>

namespace stoker::python {
void RegisterImagePipeline(nanobind::module_& m);
}  // namespace stoker::python
