#pragma once

#include <nanobind/nanobind.h>

namespace stoker::python {

// stoker.pack() and stoker.verify(): writing and checking datasets.
void RegisterPack(nanobind::module_& m);

}  // namespace stoker::python
