// See transform_options.h.
#include "transform_options.h"

#include <Python.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>
#include <vector>

#include <nanobind/stl/string.h>

#include "errors.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

using decode::OptionKind;

[[noreturn]] void Fail(PyObject* type, const decode::TransformOption& option, std::string_view what,
                       nb::handle value) {
  const std::string message = std::string(option.name) + " must be " + std::string(what) +
                              ", not " + nb::cast<std::string>(nb::repr(value));
  PyErr_SetString(type, message.c_str());
  throw nb::python_error();
}

// Python and NumPy numbers alike (np.float32 is not a float subclass), but not bools.
bool IsNumber(nb::handle v) { return !PyBool_Check(v.ptr()) && PyNumber_Check(v.ptr()); }

// An integer (int, np.int64, ...): PyIndex_Check, as range() accepts; not bools.
bool IsInteger(nb::handle v) { return !PyBool_Check(v.ptr()) && PyIndex_Check(v.ptr()); }

double AsDouble(nb::handle v) {
  const double d = PyFloat_AsDouble(v.ptr());
  if (d == -1.0 && PyErr_Occurred()) throw nb::python_error();
  return d;
}

// `count` numbers from a sequence, or one number repeated when `repeat` allows it.
std::vector<double> Numbers(const decode::TransformOption& option, nb::handle value, size_t count,
                            bool repeat, std::string_view what) {
  // A sequence first: a NumPy array is a number to PyNumber_Check too.
  const bool sequence = PySequence_Check(value.ptr()) && !PyUnicode_Check(value.ptr());
  if (!sequence && repeat && IsNumber(value)) {
    return std::vector<double>(count, AsDouble(value));
  }
  if (!sequence || PySequence_Size(value.ptr()) != Py_ssize_t(count)) {
    Fail(PyExc_ValueError, option, what, value);
  }
  std::vector<double> out;
  for (Py_ssize_t i = 0; i < Py_ssize_t(count); ++i) {
    nb::object item = nb::steal(PySequence_GetItem(value.ptr(), i));
    if (!item.is_valid()) throw nb::python_error();
    if (!IsNumber(item)) Fail(PyExc_TypeError, option, what, value);
    out.push_back(AsDouble(item));
  }
  return out;
}

decode::OptionValue FromPython(const decode::TransformOption& option, nb::handle value) {
  switch (option.kind) {
    case OptionKind::kBool:
      if (!PyBool_Check(value.ptr())) Fail(PyExc_TypeError, option, "True or False", value);
      return nb::cast<bool>(value);
    case OptionKind::kUnsigned: {
      if (!IsInteger(value)) Fail(PyExc_TypeError, option, "an int", value);
      nb::object index = nb::steal(PyNumber_Index(value.ptr()));
      if (!index.is_valid()) throw nb::python_error();
      const long long n = PyLong_AsLongLong(index.ptr());
      if (n == -1 && PyErr_Occurred()) throw nb::python_error();
      if (n < 0) Fail(PyExc_ValueError, option, "an int >= 0", value);
      return uint64_t(n);
    }
    case OptionKind::kNumber:
      if (!IsNumber(value)) Fail(PyExc_TypeError, option, "a number", value);
      return AsDouble(value);
    case OptionKind::kChoice: {
      std::string expected = "one of";
      for (const std::string_view c : option.choices) expected += " '" + std::string(c) + "'";
      if (!PyUnicode_Check(value.ptr())) Fail(PyExc_TypeError, option, expected, value);
      std::string s = nb::cast<std::string>(value);
      for (const std::string_view c : option.choices) {
        if (c == s) return s;
      }
      Fail(PyExc_ValueError, option, expected, value);
    }
    case OptionKind::kPair:
      return Numbers(option, value, 2, true, "a number or a pair of numbers");
    case OptionKind::kTriple:
      return Numbers(option, value, 3, false, "three numbers, one per channel");
    case OptionKind::kSize:
      return Numbers(option, value, 2, true, "an int or (height, width)");
  }
  Fail(PyExc_TypeError, option, "a known kind", value);
}

// The shortest decimal that reads back as the same float32: 0.485, not 0.48500001430511475.
double ShortestFloat32(double v) {
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, static_cast<float>(v));
  double out = v;
  if (ec == std::errc()) std::from_chars(buf, end, out);
  return out;
}

}  // namespace

void SetTransformOptions(const nb::dict& values, std::span<const char* const> other_keys,
                         decode::TransformOptions& options) {
  for (const auto& [key, value] : values) {
    const std::string name = nb::cast<std::string>(key);
    if (std::ranges::find(other_keys, name) != other_keys.end()) continue;
    const decode::TransformOption* option = decode::FindTransformOption(name);
    if (option == nullptr) throw nb::key_error(("unknown image option " + name).c_str());
    if (value.is_none()) continue;
    // The setter's message names the option ("size must be whole pixels >= 1, not 10.5").
    ThrowIfError(option->set(options, FromPython(*option, value)));
  }
}

nb::object TransformOptionValue(const decode::TransformOption& option,
                                const decode::TransformOptions& options) {
  const decode::OptionValue v = option.get(options);
  switch (option.kind) {
    case OptionKind::kBool:
      return nb::cast(std::get<bool>(v));
    case OptionKind::kUnsigned:
      return nb::cast(std::get<uint64_t>(v));
    case OptionKind::kNumber:
      return nb::cast(std::get<double>(v));
    case OptionKind::kChoice:
      return nb::cast(std::get<std::string>(v));
    case OptionKind::kPair:
    case OptionKind::kTriple:
    case OptionKind::kSize:
      break;
  }
  const std::vector<double>& values = std::get<std::vector<double>>(v);
  if (option.kind == OptionKind::kSize) {
    const auto h = int64_t(values[0]), w = int64_t(values[1]);
    return h == w ? nb::cast(h) : nb::object(nb::make_tuple(h, w));
  }
  nb::list items;
  for (const double x : values) {
    items.append(option.kind == OptionKind::kTriple ? ShortestFloat32(x) : x);
  }
  return nb::tuple(items);
}

std::string_view KindName(OptionKind kind) {
  switch (kind) {
    case OptionKind::kBool:
      return "bool";
    case OptionKind::kUnsigned:
      return "unsigned";
    case OptionKind::kNumber:
      return "number";
    case OptionKind::kChoice:
      return "choice";
    case OptionKind::kPair:
      return "pair";
    case OptionKind::kTriple:
      return "triple";
    case OptionKind::kSize:
      return "size";
  }
  return "unknown";
}

}  // namespace stoker::python
