#pragma once

#include <nanobind/nanobind.h>

namespace stoker::python {

// stoker._core.log_*: the library's log lines (common/log.h), queued for stoker._log's thread,
// which hands them to Python's `logging` ("stoker" logger).
void RegisterLog(nanobind::module_& m);

}  // namespace stoker::python
