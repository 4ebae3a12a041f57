#pragma once

#include <nanobind/nanobind.h>

namespace stoker::python {

// stoker._core.trace_*: the C++ trace writer (common/trace.h) that stoker.trace drives.
void RegisterTrace(nanobind::module_& m);

}  // namespace stoker::python
