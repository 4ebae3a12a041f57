#pragma once

#include <string>

#include <nanobind/nanobind.h>

#include "dataset/packer.h"

namespace stoker::python {

// stoker.pack() and stoker.verify(): writing and checking datasets.
void RegisterPack(nanobind::module_& m);

// The packer's messages name the CLI's flags; a Python caller is told the keyword instead.
Status SpokenInPython(const Status& status);
// A pack's summary as stoker.pack returns it (the fields of `stoker pack --json`).
nanobind::dict PackSummaryDict(const std::string& dst, const dataset::PackSummary& summary);

}  // namespace stoker::python
