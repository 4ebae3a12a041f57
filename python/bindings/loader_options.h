#pragma once

#include <nanobind/nanobind.h>

namespace stoker::python {

// stoker._core.loader_options() and parse_loader_options(): stoker.Loader's option table
// (src/loader/loader_option_table.h) for the Python loaders and scripts/gen_options.py.
void RegisterLoaderOptions(nanobind::module_& m);

}  // namespace stoker::python
