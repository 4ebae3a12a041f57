#pragma once

#include <nanobind/nanobind.h>

namespace stoker::python {

// stoker.Dataset: the map-style read API.
void RegisterDataset(nanobind::module_& m);

}  // namespace stoker::python
