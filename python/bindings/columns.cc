#include "columns.h"

#include <Python.h>

#include <string>

#include <fmt/format.h>
#include <nanobind/stl/string.h>

#include "errors.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

using format::ColumnType;

using PathOf = std::function<std::string()>;

[[noreturn]] void Corrupt(const PathOf& path, std::string_view why) {
  ThrowStatus(Status::Corruption(fmt::format("{}: {}", path(), why)));
}

std::string_view Text(const nb::bytes& data) {
  return {static_cast<const char*>(data.data()), data.size()};
}

nb::object Utf8(const nb::bytes& data, const PathOf& path) {
  PyObject* s = PyUnicode_DecodeUTF8(static_cast<const char*>(data.data()),
                                     static_cast<Py_ssize_t>(data.size()), "strict");
  if (s == nullptr) {
    PyErr_Clear();
    Corrupt(path, "not UTF-8 text");
  }
  return nb::steal(s);
}

// numpy.frombuffer(data, dtype, count, offset): a read-only view that keeps `data` alive.
nb::object ArrayView(const nb::bytes& data, const format::ElementType& element, uint64_t count,
                     uint64_t offset) {
  // Leaked on purpose: a static nb::object would be released after the interpreter is gone.
  static const nb::handle frombuffer =
      nb::object(nb::module_::import_("numpy").attr("frombuffer")).release();
  return frombuffer(data, nb::arg("dtype") = element.Descr(), nb::arg("count") = count,
                    nb::arg("offset") = offset);
}

}  // namespace

nb::object ColumnValue(const format::Column& column, const nb::bytes& data, const PathOf& path) {
  switch (column.type) {
    case ColumnType::kBytes:
    case ColumnType::kJpeg:
    case ColumnType::kPng:
      return data;
    case ColumnType::kStr:
      return Utf8(data, path);
    case ColumnType::kJson: {
      static const nb::handle loads =
          nb::object(nb::module_::import_("json").attr("loads")).release();
      const nb::object text = Utf8(data, path);
      try {
        return loads(text);
      } catch (nb::python_error&) {
        Corrupt(path, "not a JSON document");
      }
    }
    case ColumnType::kInt: {
      const Result<int64_t> v = format::ParseIntText(Text(data));
      if (!v) Corrupt(path, v.error().message());
      return nb::int_(*v);
    }
    case ColumnType::kFloat: {
      const Result<double> v = format::ParseFloatText(Text(data));
      if (!v) Corrupt(path, v.error().message());
      return nb::float_(*v);
    }
    case ColumnType::kNdarray: {
      const auto bytes =
          std::as_bytes(std::span(static_cast<const char*>(data.data()), data.size()));
      const Result<format::NpyLayout> layout = format::ParseNpy(bytes);
      if (!layout) Corrupt(path, layout.error().message());
      if (column.element && layout->element != *column.element) {
        Corrupt(path, fmt::format("dtype {}, but the column holds {}", layout->element.Name(),
                                  column.element->Name()));
      }
      if (!column.shape.empty() && layout->shape != column.shape) {
        Corrupt(path,
                fmt::format("shape {}, but the column holds {}", format::ShapeText(layout->shape),
                            format::ShapeText(column.shape)));
      }
      nb::list shape;
      for (uint64_t d : layout->shape) shape.append(d);
      return ArrayView(data, layout->element, layout->count, layout->data_offset)
          .attr("reshape")(nb::tuple(shape));
    }
    case ColumnType::kTokens: {
      const format::ElementType element = column.element.value_or(format::kDefaultTokenElement);
      if (data.size() % element.size != 0) {
        Corrupt(path, fmt::format("{} bytes is not a whole number of {} tokens", data.size(),
                                  element.Name()));
      }
      return ArrayView(data, element, data.size() / element.size, 0);
    }
  }
  Corrupt(path, "unknown column type");
}

nb::dict SchemaDict(const format::Schema& schema) {
  nb::dict d;
  for (const format::Column& c : schema.columns) d[c.name.c_str()] = format::ColumnTypeText(c);
  return d;
}

}  // namespace stoker::python
