// A column dataset's samples (stoker.Writer; format/columns.h): which file holds each column's
// value. Dataset::ReadColumns (defined in column_sample.cc) reads and decodes them; Python's
// stoker.Dataset and its loaders, which have the files' bytes already, decode with
// format::DecodeColumnValue themselves.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "format/columns.h"
#include "stoker/dataset.h"

namespace stoker::dataset {

// A grouped sample's file path split at the first '.' of its name: (key, extension), the
// extension being a tar member's ("cls" of "d/x.cls") or a column's name; "" without a '.'.
std::pair<std::string, std::string> SplitSampleKey(std::string_view path);

// The files of the sample [first, first + count) of a column dataset of `schema`: per column, in
// the schema's order, the file holding its value, or nullopt for an optional column the sample
// has no value for. Corruption where a file is of no column, or of another sample's key, or a
// column that is not optional has no value.
Result<std::vector<std::optional<uint64_t>>> ColumnFiles(const Dataset& ds,
                                                         const format::Schema& schema,
                                                         uint64_t first, uint64_t count);

}  // namespace stoker::dataset
