// A column dataset's values (format/columns.h) as Python objects: int, float, str, bytes, JSON
// values, and NumPy arrays that view the file's bytes without a copy. The library decodes and
// checks them (format/column_values.h); this only converts.
#pragma once

#include <functional>
#include <string>

#include <nanobind/nanobind.h>

#include "format/columns.h"

namespace stoker::python {

// The value of `column` stored as `data` (the bytes of a file, which `path()` names in errors,
// called only then: a value that does not parse is a stoker.CorruptionError), decoded and checked
// by format::DecodeColumnValue and made a Python object here. Arrays (ndarray, tokens) are
// read-only views of `data`.
nanobind::object ColumnObject(const format::Column& column, const nanobind::bytes& data,
                              const std::function<std::string()>& path);

// {name: type text} of a schema (empty for a dataset without columns).
nanobind::dict SchemaDict(const format::Schema& schema);

}  // namespace stoker::python
