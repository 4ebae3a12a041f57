// stoker.Writer: typed samples from Python into a column dataset (format/columns.h).
//
//   with stoker.Writer("out.stoker", columns={"image": "jpeg", "label": "int"}) as w:
//       w.write({"image": jpeg_bytes, "label": 3})
//
// Each value is checked against its column's type and encoded here, with the GIL held (it reads
// Python objects); the encoded sample then goes to a dataset::StreamPack with the GIL released,
// whose thread CRCs, writes chunks and sorts metadata while Python makes the next sample. A bad
// value is a TypeError / ValueError naming the sample (its number among this writer's samples)
// and the column, raised before any of that sample is queued: the writer stays usable and the
// dataset gets the good samples only. Nothing is visible until the `with` block ends without
// an exception (close()); an exception in it, abort(), or a crash publish nothing.
#include "writer.h"

#include <Python.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include "columns.h"
#include "common/progress.h"
#include "dataset/addition.h"
#include "dataset/pack_option_table.h"
#include "dataset/parts.h"
#include "dataset/stream_pack.h"
#include "errors.h"
#include "format/columns.h"
#include "fs_path.h"
#include "options.h"
#include "pack.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

using format::Column;
using format::ColumnType;
using format::ElementType;

constexpr const char* kProgress = "progress";
constexpr const char* kName = "name";
constexpr const char* kPart = "part";
constexpr const char* kJob = "job";
constexpr const char* kOwnKeys[] = {kProgress, kName, kPart, kJob};
// Pack options that describe a directory or tar input, which a writer has not.
constexpr std::string_view kInputOnlyKeys[] = {"threads", "layout", "labels"};
// Samples waiting for the packing thread: enough to keep it busy, small beside a pack's memory.
constexpr uint64_t kQueueBytes = 64ull << 20;

// A Python buffer (bytes, bytearray, memoryview, NumPy array), released on scope exit.
class Buffer {
 public:
  // False (and no Python error set) if `obj` exports no buffer with `flags`.
  bool Get(nb::handle obj, int flags) {
    if (PyObject_GetBuffer(obj.ptr(), &view_, flags) != 0) {
      PyErr_Clear();
      return false;
    }
    held_ = true;
    return true;
  }
  ~Buffer() {
    if (held_) PyBuffer_Release(&view_);
  }
  const Py_buffer& view() const { return view_; }
  std::span<const std::byte> bytes() const {
    return {static_cast<const std::byte*>(view_.buf), static_cast<size_t>(view_.len)};
  }

 private:
  Py_buffer view_{};
  bool held_ = false;
};

// The element type of a buffer's struct-module format ("<f", "B", "Zd"), or nullopt.
std::optional<ElementType> ElementOfFormat(const char* format, Py_ssize_t itemsize) {
  std::string_view f = format != nullptr ? format : "B";
  if (!f.empty() && (f[0] == '<' || f[0] == '=' || f[0] == '@' || f[0] == '|')) f.remove_prefix(1);
  char kind = 0;
  if (f == "?")
    kind = 'b';
  else if (f.size() == 1 && std::string_view("bhilq").find(f[0]) != std::string_view::npos)
    kind = 'i';
  else if (f.size() == 1 && std::string_view("BHILQ").find(f[0]) != std::string_view::npos)
    kind = 'u';
  else if (f == "e" || f == "f" || f == "d")
    kind = 'f';
  else if (f == "Zf" || f == "Zd")
    kind = 'c';
  if (kind == 0) return std::nullopt;
  const ElementType element{kind, static_cast<uint8_t>(itemsize)};
  if (!format::ParseElementType(element.Name())) return std::nullopt;
  return element;
}

std::vector<std::byte> ToBytes(std::string_view s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

class PyWriter {
 public:
  PyWriter(nb::handle output, const nb::dict& columns, const std::optional<std::string>& label,
           const nb::kwargs& kwargs)
      : output_(FsPath(output)) {
    std::vector<Column> list;
    for (auto [name, type] : columns) {
      if (!nb::isinstance<nb::str>(name) || !nb::isinstance<nb::str>(type)) {
        throw nb::type_error("columns: a dict of {name: type}, both str (e.g. {'image': 'jpeg'})");
      }
      list.push_back(ValueOrThrow(
          format::ParseColumn(nb::cast<std::string>(name), nb::cast<std::string>(type))));
    }
    schema_ = ValueOrThrow(format::MakeSchema(std::move(list), DefaultLabel(columns, label)));
    for (std::string_view key : kInputOnlyKeys) {
      if (kwargs.contains(key.data())) {
        throw nb::type_error(
            fmt::format("Writer() got an unexpected keyword argument '{}' (it describes a "
                        "directory or tar input; a writer's input is its samples)",
                        key)
                .c_str());
      }
    }
    dataset::PackSettings settings;
    SetOptions(kwargs, kOwnKeys, dataset::PackOptionTable(),
               {PyExc_TypeError, "Writer() got an unexpected keyword argument "}, settings);
    const bool progress =
        !kwargs.contains(kProgress) ||
        std::get<bool>(OptionFromPython(kProgress, OptionKind::kBool, {}, kwargs[kProgress]));
    dataset::PackOptions options = std::move(settings.pack);
    options.group_samples = true;
    options.columns = format::FormatSchema(schema_);
    options.part = Part(kwargs);
    bar_ = std::make_unique<ProgressBar>("write", progress);
    options.progress = [bar = bar_.get()](const dataset::PackProgress& p) {
      bar->Update(p.files_done, 0, p.bytes_done);
    };
    key_prefix_ = KeyPrefix(kwargs);
    Result<std::unique_ptr<dataset::StreamPack>> started = Err(Status::Internal("unset"));
    {
      nb::gil_scoped_release release;
      auto storage = OpenStorage(output_);
      started =
          storage ? dataset::StreamPack::Start(*std::move(storage), std::move(options), kQueueBytes)
                  : Err(storage.error());
    }
    if (!started) ThrowStatus(SpokenInPython(started.error()));
    pack_ = *std::move(started);
  }

  void Write(nb::handle sample) {
    if (!pack_) throw nb::value_error("the writer is closed");
    if (!PyDict_Check(sample.ptr())) {
      throw nb::type_error(fmt::format("sample {}: expected a dict of {{column: value}}, got {}",
                                       written_, nb::inst_name(sample).c_str())
                               .c_str());
    }
    const nb::dict values = nb::borrow<nb::dict>(sample);
    for (auto [key, value] : values) {
      const std::string name = nb::isinstance<nb::str>(key) ? nb::cast<std::string>(key) : "";
      if (schema_.Find(name) == nullptr) {
        throw nb::value_error(fmt::format("sample {}: {} is not a column (the columns: {})",
                                          written_, nb::repr(key).c_str(), ColumnNames())
                                  .c_str());
      }
    }
    const std::string key = fmt::format("{}{:012}", key_prefix_, written_);
    std::vector<dataset::SourceItem> items;
    items.reserve(schema_.columns.size());
    for (const Column& column : schema_.columns) {
      PyObject* value = PyDict_GetItemString(values.ptr(), column.name.c_str());  // borrowed
      if (value == nullptr || value == Py_None) {
        if (column.optional) continue;
        throw nb::value_error(fmt::format("sample {}: no value for column '{}' (not optional: "
                                          "its type would be '{}?')",
                                          written_, column.name, format::ColumnTypeText(column))
                                  .c_str());
      }
      items.push_back({format::ColumnPath(key, column.name), Encode(column, value), nullptr, 0});
    }
    if (items.empty()) {
      throw nb::value_error(
          fmt::format("sample {}: {}", written_, format::kSampleWithoutValues).c_str());
    }
    Status added;
    {
      nb::gil_scoped_release release;
      added = pack_->Add(std::move(items));
    }
    if (!added.ok()) ThrowStatus(SpokenInPython(added));
    ++written_;
  }

  nb::dict Close() {
    if (!pack_) throw nb::value_error("the writer is closed");
    Result<dataset::PackSummary> result = Err(Status::Internal("unset"));
    {
      nb::gil_scoped_release release;
      result = pack_->Finish();
      bar_->Finish();
      pack_.reset();
    }
    if (!result) ThrowStatus(SpokenInPython(result.error()));
    nb::dict summary = PackSummaryDict(output_, *result);
    summary_ = summary;
    return summary;
  }

  void Abort() {
    if (!pack_) return;
    nb::gil_scoped_release release;
    pack_->Abort();
    bar_->Finish();
    pack_.reset();
  }

  nb::dict Columns() const { return SchemaDict(schema_); }
  std::optional<std::string> label() const {
    return schema_.label.empty() ? std::nullopt : std::optional(schema_.label);
  }
  uint64_t written() const { return written_; }
  bool closed() const { return !pack_; }
  nb::object summary() const { return summary_.is_valid() ? summary_ : nb::none(); }
  const std::string& output() const { return output_; }

 private:
  // The label column: the one named, or "label" when that is an int column (optional or not:
  // every column from Parquet, Spark or Ray is optional), else none.
  static std::string DefaultLabel(const nb::dict& columns,
                                  const std::optional<std::string>& label) {
    if (label) return *label;
    if (!columns.contains("label")) return "";
    const nb::object type = columns["label"];
    if (!nb::isinstance<nb::str>(type)) return "";
    const std::string text = nb::cast<std::string>(type);
    return text == "int" || text == "int?" ? "label" : "";
  }

  // Where this writer's samples go (dataset::SampleKeyPrefix): name=, else a random id.
  static std::string KeyPrefix(const nb::kwargs& kwargs) {
    std::optional<std::string> name;
    if (kwargs.contains(kName) && !kwargs[kName].is_none()) {
      if (!nb::isinstance<nb::str>(kwargs[kName])) throw nb::type_error("name must be a str");
      name = nb::cast<std::string>(kwargs[kName]);
    }
    return ValueOrThrow(dataset::SampleKeyPrefix(name));
  }

  // part=(k, n), "K/N", "K" or "env", with job=: the part of one version that stoker.commit
  // publishes (docs/format.md §5.3); None: publish on close.
  static std::optional<dataset::PartSpec> Part(const nb::kwargs& kwargs) {
    const nb::object part = kwargs.contains(kPart) ? kwargs[kPart] : nb::none();
    const nb::object job = kwargs.contains(kJob) ? kwargs[kJob] : nb::none();
    if (!job.is_none() && !nb::isinstance<nb::str>(job)) throw nb::type_error("job must be a str");
    if (part.is_none()) {
      if (!job.is_none()) throw nb::type_error("job names the parts of part=; pass part= too");
      return std::nullopt;
    }
    std::string text;
    if (nb::isinstance<nb::str>(part)) {
      text = nb::cast<std::string>(part);
    } else if (nb::isinstance<nb::tuple>(part) && nb::len(part) == 2) {
      text = fmt::format("{}/{}", nb::cast<uint32_t>(part[0]), nb::cast<uint32_t>(part[1]));
    } else {
      throw nb::type_error("part: (k, n), 'K/N', 'K' or 'env'");
    }
    return ValueOrThrow(
        dataset::ParsePartSpec(text, job.is_none() ? "" : nb::cast<std::string>(job)));
  }

  std::string ColumnNames() const {
    std::string names;
    for (const Column& c : schema_.columns) names += (names.empty() ? "" : ", ") + c.name;
    return names;
  }

  [[noreturn]] void Bad(PyObject* type, const Column& column, std::string_view why) const {
    PyErr_SetString(type,
                    fmt::format("sample {}: column '{}': {}", written_, column.name, why).c_str());
    throw nb::python_error();
  }
  [[noreturn]] void WrongType(const Column& column, PyObject* value,
                              std::string_view wanted) const {
    // The type's __name__: tp_name is not in the stable ABI.
    const nb::str got = nb::borrow<nb::str>(nb::handle(value).type().attr("__name__"));
    Bad(PyExc_TypeError, column, fmt::format("expected {}, got {}", wanted, got.c_str()));
  }

  std::vector<std::byte> Encode(const Column& column, PyObject* value) {
    switch (column.type) {
      case ColumnType::kBytes:
      case ColumnType::kJpeg:
      case ColumnType::kPng:
        return EncodeBytes(column, value);
      case ColumnType::kStr: {
        if (!PyUnicode_Check(value)) WrongType(column, value, "str");
        Py_ssize_t size = 0;
        const char* utf8 = PyUnicode_AsUTF8AndSize(value, &size);
        if (utf8 == nullptr) {
          PyErr_Clear();
          Bad(PyExc_ValueError, column, "not encodable as UTF-8 (a lone surrogate?)");
        }
        return ToBytes({utf8, static_cast<size_t>(size)});
      }
      case ColumnType::kInt: {
        if (PyBool_Check(value) || !PyIndex_Check(value)) WrongType(column, value, "int");
        int overflow = 0;
        nb::object index = nb::steal(PyNumber_Index(value));
        if (!index.is_valid()) throw nb::python_error();
        const long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
        if (overflow != 0) Bad(PyExc_ValueError, column, "out of the int64 range");
        if (column.name == schema_.label && (v < 0 || v > dataset::kMaxClsLabel)) {
          Bad(PyExc_ValueError, column,
              fmt::format("label {} is outside 0 .. {} (the label column's values are classes)", v,
                          dataset::kMaxClsLabel));
        }
        return ToBytes(format::IntText(v));
      }
      case ColumnType::kFloat: {
        if (PyBool_Check(value) || PyUnicode_Check(value) || !PyNumber_Check(value)) {
          WrongType(column, value, "float");
        }
        const double v = PyFloat_AsDouble(value);
        if (v == -1.0 && PyErr_Occurred()) throw nb::python_error();
        if (!std::isfinite(v) && !column.allow_nan) {
          Bad(PyExc_ValueError, column,
              fmt::format("{} is not allowed (type 'float:nan' allows NaN and infinities)",
                          format::FloatText(v)));
        }
        return ToBytes(format::FloatText(v));
      }
      case ColumnType::kJson: {
        if (!json_dumps_.is_valid()) json_dumps_ = nb::module_::import_("json").attr("dumps");
        nb::object text;
        try {
          text = json_dumps_(nb::handle(value), nb::arg("ensure_ascii") = false,
                             nb::arg("allow_nan") = false,
                             nb::arg("separators") = nb::make_tuple(",", ":"));
        } catch (nb::python_error& e) {
          // The exception's own words ("Object of type set is not JSON serializable"), not the
          // traceback what() carries.
          Bad(PyExc_ValueError, column, fmt::format("not JSON: {}", nb::str(e.value()).c_str()));
        }
        format::Column as_text;
        as_text.name = column.name;
        as_text.type = ColumnType::kStr;
        return Encode(as_text, text.ptr());
      }
      case ColumnType::kNdarray:
        return EncodeArray(column, value);
      case ColumnType::kTokens:
        return EncodeTokens(column, value);
    }
    Bad(PyExc_ValueError, column, "unknown column type");
  }

  std::vector<std::byte> EncodeBytes(const Column& column, PyObject* value) {
    Buffer buffer;
    if (PyUnicode_Check(value) || !buffer.Get(value, PyBUF_C_CONTIGUOUS)) {
      WrongType(column, value, "bytes-like (bytes, bytearray, memoryview)");
    }
    const std::span<const std::byte> b = buffer.bytes();
    const std::string_view magic = format::ImageSignature(column.type);
    if (b.size() < magic.size() || std::memcmp(b.data(), magic.data(), magic.size()) != 0) {
      Bad(PyExc_ValueError, column,
          column.type == ColumnType::kJpeg ? "not a JPEG (no FF D8 FF at its start)"
                                           : "not a PNG (no PNG signature at its start)");
    }
    return {b.begin(), b.end()};
  }

  // `value` as a C-contiguous array buffer: itself, or what numpy.ascontiguousarray makes of it
  // (a list, a strided view). Keeps the converted object alive in *holder.
  void ArrayBuffer(const Column& column, PyObject* value, Buffer& buffer, nb::object* holder) {
    constexpr int kFlags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT;
    if (!PyUnicode_Check(value) && !PyBytes_Check(value) && buffer.Get(value, kFlags)) return;
    if (!as_array_.is_valid()) {
      as_array_ = nb::module_::import_("numpy").attr("ascontiguousarray");
    }
    try {
      *holder = as_array_(nb::handle(value));
    } catch (nb::python_error&) {
      WrongType(column, value, "an array (a NumPy array or anything numpy.asarray takes)");
    }
    if (!buffer.Get(*holder, kFlags)) {
      WrongType(column, value, "an array of numbers (NumPy has made it an object array)");
    }
  }

  std::vector<std::byte> EncodeArray(const Column& column, PyObject* value) {
    Buffer buffer;
    nb::object holder;
    ArrayBuffer(column, value, buffer, &holder);
    const Py_buffer& v = buffer.view();
    const auto element = ElementOfFormat(v.format, v.itemsize);
    if (!element) {
      Bad(PyExc_TypeError, column,
          fmt::format("dtype with format '{}' is not a number type stoker stores (bool, ints, "
                      "floats, complex; little-endian)",
                      v.format != nullptr ? v.format : "?"));
    }
    if (column.element && *column.element != *element) {
      Bad(PyExc_TypeError, column,
          fmt::format("dtype {}, but the column holds {}", element->Name(),
                      column.element->Name()));
    }
    std::vector<uint64_t> shape(static_cast<size_t>(v.ndim));
    for (int d = 0; d < v.ndim; ++d)
      shape[static_cast<size_t>(d)] = static_cast<uint64_t>(v.shape[d]);
    if (!column.shape.empty() && shape != column.shape) {
      Bad(PyExc_ValueError, column,
          fmt::format("shape {}, but the column holds {} ({})", format::ShapeText(shape),
                      format::ShapeText(column.shape), format::ColumnTypeText(column)));
    }
    const std::string header = format::NpyHeader(*element, shape);
    std::vector<std::byte> out(header.size() + static_cast<size_t>(v.len));
    std::memcpy(out.data(), header.data(), header.size());
    if (v.len > 0) std::memcpy(out.data() + header.size(), v.buf, static_cast<size_t>(v.len));
    return out;
  }

  // 1-D integers in the column's element type; other integer types are converted when every
  // value fits.
  std::vector<std::byte> EncodeTokens(const Column& column, PyObject* value) {
    Buffer buffer;
    nb::object holder;
    ArrayBuffer(column, value, buffer, &holder);
    const Py_buffer& v = buffer.view();
    const auto element = ElementOfFormat(v.format, v.itemsize);
    if (v.ndim > 1) Bad(PyExc_ValueError, column, fmt::format("{}-D; tokens are 1-D", v.ndim));
    const ElementType want = column.element.value_or(format::kDefaultTokenElement);
    if (!element || (element->kind != 'i' && element->kind != 'u' && v.len > 0)) {
      Bad(PyExc_TypeError, column,
          fmt::format("tokens are integers; got dtype with format '{}'",
                      v.format != nullptr ? v.format : "?"));
    }
    const std::span<const std::byte> in = buffer.bytes();
    if (*element == want) return {in.begin(), in.end()};
    const size_t n = static_cast<size_t>(v.len / v.itemsize);
    std::vector<std::byte> out(n * want.size);
    const bool in_signed = element->kind == 'i', out_signed = want.kind == 'i';
    const unsigned out_bits = want.size * 8u;
    for (size_t i = 0; i < n; ++i) {
      const std::byte* p = in.data() + i * element->size;
      // Widened: as int64 (signed input) or uint64 (unsigned).
      uint64_t raw = 0;
      std::memcpy(&raw, p, element->size);  // little-endian host (checked at build)
      int64_t s = 0;
      bool negative = false;
      if (in_signed) {
        const unsigned shift = 64u - element->size * 8u;
        s = static_cast<int64_t>(raw << shift) >> shift;
        negative = s < 0;
      }
      const bool fits = out_signed
                            ? (negative ? out_bits == 64 || s >= -(int64_t{1} << (out_bits - 1))
                               : out_bits == 64 ? raw <= INT64_MAX
                                                : raw < (uint64_t{1} << (out_bits - 1)))
                            : !negative && (out_bits == 64 || raw < (uint64_t{1} << out_bits));
      if (!fits) {
        Bad(PyExc_ValueError, column,
            fmt::format("token {} (at {}) does not fit {}",
                        in_signed ? fmt::format("{}", s) : fmt::format("{}", raw), i, want.Name()));
      }
      std::memcpy(out.data() + i * want.size, &raw, want.size);
    }
    return out;
  }

  const std::string output_;
  format::Schema schema_;
  std::string key_prefix_;
  std::unique_ptr<ProgressBar> bar_;
  std::unique_ptr<dataset::StreamPack> pack_;
  uint64_t written_ = 0;
  nb::object summary_;  // close()'s dict once closed
  nb::object json_dumps_, as_array_;
};

}  // namespace

void RegisterWriter(nb::module_& m) {
  nb::class_<PyWriter>(
      m, "Writer",
      "Writes typed samples into a new dataset (or, with append=True, the next version of an "
      "existing one).\n\n"
      "    with stoker.Writer('out.stoker', columns={'image': 'jpeg', 'label': 'int',\n"
      "                                              'caption': 'str?'}) as w:\n"
      "        w.write({'image': jpeg_bytes, 'label': 3, 'caption': 'a cat'})\n\n"
      "Column types: bytes, str, int, float, json, ndarray, jpeg, png, tokens; 'ndarray:float32' "
      "fixes an array's dtype, 'tokens:uint16' a token column's (default int32), 'float:nan' "
      "lets NaN and infinities in, and a trailing '?' makes a column optional (None or absent). "
      "`label` names an int column whose values label the samples (classes 0 .. 2^22-1); an int "
      "column called 'label' does by default. Other keyword arguments are stoker.pack's "
      "(chunk_size, append, order, order_seed, mix_memory), progress, name (the directory "
      "the samples go in; default: a random id), and part=(k, n) / 'K/N' / 'env' with job= "
      "(write part k of n of one version, published by stoker.commit, as `stoker pack "
      "--part`).\n\n"
      "A bad value raises TypeError/ValueError naming the sample and column, and that sample is "
      "left out. Nothing is visible until close() (the end of a `with` block without an "
      "exception) publishes the version; an exception or abort() publishes nothing.")
      .def(
          "__init__",
          [](PyWriter* self, nb::handle output, nb::handle columns,
             const std::optional<std::string>& label, const nb::kwargs& kwargs) {
            // Checked here, not by the signature: nanobind's "incompatible function arguments"
            // does not say that the schema is what is missing.
            if (!nb::isinstance<nb::dict>(columns)) {
              throw nb::type_error(
                  ("Writer needs columns, a dict {name: type} such as {'image': 'jpeg', "
                   "'label': 'int'}; got " +
                   (columns.is_none() ? std::string("none")
                                      : nb::cast<std::string>(nb::repr(columns))))
                      .c_str());
            }
            new (self) PyWriter(output, nb::borrow<nb::dict>(columns), label, kwargs);
          },
          // What the stub and help() show: columns is required (the check above explains).
          nb::sig("def __init__(self, output: object, columns: dict, *, label: str | None = "
                  "None, **kwargs) -> None"),
          nb::arg("output"), nb::arg("columns").none() = nb::none(), nb::kw_only(),
          nb::arg("label") = nb::none(), nb::arg("kwargs"))
      .def("write", &PyWriter::Write, nb::arg("sample"), "Adds one sample: a dict {column: value}.")
      .def("close", &PyWriter::Close, "Publishes the version; returns stoker.pack's summary dict.")
      .def("abort", &PyWriter::Abort, "Stops without publishing; removes what was written.")
      .def("__enter__", [](nb::handle self) { return nb::borrow(self); })
      .def(
          "__exit__",
          [](PyWriter& self, nb::handle type, nb::handle, nb::handle) {
            if (self.closed()) return;
            if (type.is_none()) {
              self.Close();
            } else {
              self.Abort();
            }
          },
          nb::arg("type").none(), nb::arg("value").none(), nb::arg("traceback").none())
      .def_prop_ro("columns", &PyWriter::Columns, "The schema: {name: type}.")
      .def_prop_ro("label", &PyWriter::label, "The label column, or None.")
      .def_prop_ro("samples_written", &PyWriter::written)
      .def_prop_ro("closed", &PyWriter::closed)
      .def_prop_ro("summary", &PyWriter::summary, "close()'s summary once closed, else None.");
}

}  // namespace stoker::python
