// Decoding a column dataset's values (columns.h) from their files' bytes into typed values
// (stoker/columns.h), with every check a reader needs: the one decoder behind
// Dataset::ReadColumns and Python's stoker.Dataset, whose bindings only convert its values.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <string>

#include "format/columns.h"
#include "stoker/columns.h"
#include "stoker/status.h"

namespace stoker::format {

// The value of `column` stored as `data` (one file's bytes). A value that is not one of the
// column's type is Corruption "<path>: <why>"; `path()` names the file and is called only then.
// Values that are views of `data` (bytes, ndarray, tokens) say where in it they lie.
Result<ColumnValue> DecodeColumnValue(const Column& column, std::span<const std::byte> data,
                                      const std::function<std::string()>& path);

}  // namespace stoker::format
