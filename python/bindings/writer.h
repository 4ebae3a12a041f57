#pragma once

#include <nanobind/nanobind.h>

namespace stoker::python {

// stoker.Writer: typed samples into a column dataset.
void RegisterWriter(nanobind::module_& m);

}  // namespace stoker::python
