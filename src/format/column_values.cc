#include "format/column_values.h"

#include <string_view>

#include <fmt/format.h>

#include "common/escape.h"

namespace stoker::format {

Result<ColumnValue> DecodeColumnValue(const Column& column, std::span<const std::byte> data,
                                      const std::function<std::string()>& path) {
  const std::string_view text(reinterpret_cast<const char*>(data.data()), data.size());
  const auto corrupt = [&](std::string_view why) {
    return Err(Status::Corruption(fmt::format("{}: {}", path(), why)));
  };
  switch (column.type) {
    case ColumnType::kBytes:
    case ColumnType::kJpeg:
    case ColumnType::kPng:
      return ColumnValue(BytesValue{});
    case ColumnType::kStr:
      if (!IsUtf8(text)) return corrupt("not UTF-8 text");
      return ColumnValue(std::string(text));
    case ColumnType::kJson:
      if (!IsUtf8(text)) return corrupt("not UTF-8 text");
      return ColumnValue(JsonValue{std::string(text)});
    case ColumnType::kInt: {
      const Result<int64_t> v = ParseIntText(text);
      if (!v) return corrupt(v.error().message());
      return ColumnValue(*v);
    }
    case ColumnType::kFloat: {
      const Result<double> v = ParseFloatText(text);
      if (!v) return corrupt(v.error().message());
      return ColumnValue(*v);
    }
    case ColumnType::kNdarray: {
      Result<NpyLayout> layout = ParseNpy(data);
      if (!layout) return corrupt(layout.error().message());
      if (column.element && layout->element != *column.element) {
        return corrupt(fmt::format("dtype {}, but the column holds {}", layout->element.Name(),
                                   column.element->Name()));
      }
      if (!column.shape.empty() && layout->shape != column.shape) {
        return corrupt(fmt::format("shape {}, but the column holds {}", ShapeText(layout->shape),
                                   ShapeText(column.shape)));
      }
      return ColumnValue(NdarrayValue{layout->element, std::move(layout->shape),
                                      layout->data_offset, layout->count});
    }
    case ColumnType::kTokens: {
      const ElementType element = column.element.value_or(kDefaultTokenElement);
      if (data.size() % element.size != 0) {
        return corrupt(fmt::format("{} bytes is not a whole number of {} tokens", data.size(),
                                   element.Name()));
      }
      return ColumnValue(TokensValue{element, data.size() / element.size});
    }
  }
  return corrupt("unknown column type");
}

}  // namespace stoker::format
