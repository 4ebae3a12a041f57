#pragma once

#include <nanobind/nanobind.h>

namespace stoker::python {

// stoker._core.Sampler: loader::Sampler (src/loader/sampler.h) for the Python loaders.
void RegisterSampler(nanobind::module_& m);

}  // namespace stoker::python
