#pragma once

#include <nanobind/nanobind.h>

namespace stoker::python {

// stoker._core.ReadPipeline: the C++ read pipeline as a Python iterator.
void RegisterPipeline(nanobind::module_& m);

}  // namespace stoker::python
