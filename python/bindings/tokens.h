#pragma once

#include <nanobind/nanobind.h>

namespace stoker::python {

// stoker._core.TokenStream: a tokens column's tokens, chunk by chunk (stoker.TokenLoader).
void RegisterTokens(nanobind::module_& m);

}  // namespace stoker::python
