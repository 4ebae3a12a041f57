// The one place where stoker Status codes become Python exceptions (see errors.cc for the table).
#pragma once

#include <nanobind/nanobind.h>

#include "stoker/status.h"

namespace stoker::python {

// Creates stoker.CorruptionError (a subclass of OSError) and adds it to `m`.
void RegisterErrors(nanobind::module_& m);

// Raises the Python exception matching `status` (which must not be OK). Call with the GIL held.
[[noreturn]] void ThrowStatus(const Status& status);

template <typename T>
T ValueOrThrow(Result<T>&& result) {
  if (!result) ThrowStatus(result.error());
  return std::move(result).value();
}

inline void ThrowIfError(const Status& status) {
  if (!status.ok()) ThrowStatus(status);
}

}  // namespace stoker::python
