#include "columns.h"

#include <span>
#include <string>
#include <variant>

#include <fmt/format.h>
#include <nanobind/stl/string.h>

#include "errors.h"
#include "format/column_values.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

using PathOf = std::function<std::string()>;

// numpy.frombuffer(data, dtype, count, offset): a read-only view that keeps `data` alive.
nb::object ArrayView(const nb::bytes& data, const ElementType& element, uint64_t count,
                     uint64_t offset) {
  // Leaked on purpose: a static nb::object would be released after the interpreter is gone.
  static const nb::handle frombuffer =
      nb::object(nb::module_::import_("numpy").attr("frombuffer")).release();
  return frombuffer(data, nb::arg("dtype") = element.Descr(), nb::arg("count") = count,
                    nb::arg("offset") = offset);
}

// The Python object of a decoded value; views (bytes, arrays) are of `data`, its file's bytes.
struct ToPython {
  const nb::bytes& data;
  const PathOf& path;

  nb::object operator()(const BytesValue&) const { return data; }
  nb::object operator()(const std::string& text) const { return Str(text); }
  nb::object operator()(int64_t v) const { return nb::int_(v); }
  nb::object operator()(double v) const { return nb::float_(v); }
  nb::object operator()(const JsonValue& json) const {
    static const nb::handle loads =
        nb::object(nb::module_::import_("json").attr("loads")).release();
    try {
      return loads(Str(json.text));
    } catch (nb::python_error&) {
      // The library checks UTF-8 only (it has no JSON parser): json.loads checks the rest.
      ThrowStatus(Status::Corruption(fmt::format("{}: not a JSON document", path())));
    }
  }
  nb::object operator()(const NdarrayValue& array) const {
    nb::list shape;
    for (uint64_t d : array.shape) shape.append(d);
    return ArrayView(data, array.element, array.count, array.offset)
        .attr("reshape")(nb::tuple(shape));
  }
  nb::object operator()(const TokensValue& tokens) const {
    return ArrayView(data, tokens.element, tokens.count, 0);
  }

  // Text the library checked to be UTF-8.
  static nb::object Str(const std::string& text) { return nb::str(text.data(), text.size()); }
};

}  // namespace

nb::object ColumnObject(const format::Column& column, const nb::bytes& data, const PathOf& path) {
  const auto bytes = std::as_bytes(std::span(static_cast<const char*>(data.data()), data.size()));
  return std::visit(ToPython{data, path},
                    ValueOrThrow(format::DecodeColumnValue(column, bytes, path)));
}

nb::dict SchemaDict(const format::Schema& schema) {
  nb::dict d;
  for (const format::Column& c : schema.columns) d[c.name.c_str()] = format::ColumnTypeText(c);
  return d;
}

}  // namespace stoker::python
