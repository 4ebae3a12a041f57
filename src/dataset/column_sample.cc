#include "dataset/column_sample.h"

#include <fmt/format.h>

#include "dataset/version_view.h"
#include "format/column_values.h"

namespace stoker {
namespace dataset {

std::pair<std::string, std::string> SplitSampleKey(std::string_view path) {
  const size_t slash = path.rfind('/');
  const size_t dot = path.find('.', slash == std::string_view::npos ? 0 : slash + 1);
  if (dot == std::string_view::npos) return {std::string(path), ""};
  return {std::string(path.substr(0, dot)), std::string(path.substr(dot + 1))};
}

Result<std::vector<std::optional<uint64_t>>> ColumnFiles(const Dataset& ds,
                                                         const format::Schema& schema,
                                                         uint64_t first, uint64_t count) {
  std::vector<std::optional<uint64_t>> files(schema.columns.size());
  if (count == schema.columns.size()) {
    // Every column there: the files are "key.<column>" in path order, i.e. in the schema's
    // (name) order, so no path needs looking up.
    for (uint64_t i = 0; i < count; ++i) files[i] = first + i;
    return files;
  }
  std::string key;
  for (uint64_t f = first; f < first + count; ++f) {
    STOKER_ASSIGN_OR_RETURN(const std::string path, ds.Path(f));
    auto [file_key, name] = SplitSampleKey(path);
    const format::Column* column = schema.Find(name);
    if (column == nullptr || (!key.empty() && file_key != key)) {
      return Err(
          Status::Corruption(fmt::format("{}: not a file of a column of this dataset", path)));
    }
    key = std::move(file_key);
    files[static_cast<size_t>(column - schema.columns.data())] = f;
  }
  for (size_t i = 0; i < files.size(); ++i) {
    if (!files[i] && !schema.columns[i].optional) {
      return Err(Status::Corruption(
          fmt::format("sample {}: no value for column '{}', which is not optional",
                      ds.FilePath(first), schema.columns[i].name)));
    }
  }
  return files;
}

}  // namespace dataset

// Here rather than in dataset.cc: the column reading above, and all of it public API.
Result<std::vector<ColumnEntry>> Dataset::ReadColumns(uint64_t sample) const {
  const format::Schema& schema = dataset::ViewOf(*this).columns();
  if (schema.empty()) {
    return Err(Status::InvalidArgument(
        "not a column dataset (one stoker.Writer wrote): its samples have no columns"));
  }
  STOKER_ASSIGN_OR_RETURN(const auto range, SampleFiles(sample));
  STOKER_ASSIGN_OR_RETURN(const auto files,
                          dataset::ColumnFiles(*this, schema, range.first, range.second));
  std::vector<ColumnEntry> columns(schema.columns.size());
  for (size_t i = 0; i < columns.size(); ++i) {
    columns[i].name = schema.columns[i].name;
    const std::optional<uint64_t>& at = files[i];
    if (!at) continue;
    const uint64_t file = *at;
    STOKER_ASSIGN_OR_RETURN(columns[i].data, ReadFile(file));
    STOKER_ASSIGN_OR_RETURN(columns[i].value,
                            format::DecodeColumnValue(schema.columns[i], columns[i].data,
                                                      [&] { return FilePath(file); }));
  }
  return columns;
}

}  // namespace stoker
