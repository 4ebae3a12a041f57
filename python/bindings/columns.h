// Reading a column dataset's values (format/columns.h) into Python objects: int, float, str,
// bytes, JSON values, and NumPy arrays that view the file's bytes without a copy.
#pragma once

#include <functional>
#include <string>

#include <nanobind/nanobind.h>

#include "format/columns.h"

namespace stoker::python {

// The value of `column` stored as `data` (the bytes of a file, which `path()` names in errors,
// called only then: a value that does not parse is a stoker.CorruptionError). Arrays (ndarray,
// tokens) are read-only views of `data`.
nanobind::object ColumnValue(const format::Column& column, const nanobind::bytes& data,
                             const std::function<std::string()>& path);

// {name: type text} of a schema (empty for a dataset without columns).
nanobind::dict SchemaDict(const format::Schema& schema);

}  // namespace stoker::python
