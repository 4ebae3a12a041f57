#pragma once

#include <nanobind/nanobind.h>

namespace stoker {
class Dataset;
}

namespace stoker::python {

// stoker.Dataset: the map-style read API.
void RegisterDataset(nanobind::module_& m);

// The C++ Dataset behind a stoker.Dataset object, opened if it was not yet (a pickled copy opens
// lazily). TypeError if `obj` is not a stoker.Dataset. Call with the GIL held; the reference
// lives as long as `obj`.
const Dataset& UnwrapDataset(nanobind::handle obj);

}  // namespace stoker::python
