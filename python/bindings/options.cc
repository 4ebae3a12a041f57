// See options.h.
#include "options.h"

#include <charconv>
#include <cmath>
#include <string>
#include <vector>

#include "common/parse_number.h"
#include "common/progress.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

// The parts of an option a conversion needs.
struct Target {
  std::string_view name;
  OptionKind kind;
  std::span<const std::string_view> choices;
};

[[noreturn]] void Fail(PyObject* type, const Target& option, std::string_view what,
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
std::vector<double> Numbers(const Target& option, nb::handle value, size_t count, bool repeat,
                            std::string_view what) {
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

// An int >= 0 (int, np.int64, ...); `what` and `at_least_0` say what the option takes.
uint64_t Unsigned(const Target& option, nb::handle value, std::string_view what,
                  std::string_view at_least_0) {
  if (!IsInteger(value)) Fail(PyExc_TypeError, option, what, value);
  nb::object index = nb::steal(PyNumber_Index(value.ptr()));
  if (!index.is_valid()) throw nb::python_error();
  int overflow = 0;
  const long long n = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (n == -1 && PyErr_Occurred()) throw nb::python_error();
  if (overflow < 0 || (overflow == 0 && n < 0)) Fail(PyExc_ValueError, option, at_least_0, value);
  if (overflow == 0) return uint64_t(n);
  // Above 2^63 still fits (a seed of 64 random bits); 2^64 and above: OverflowError, as before,
  // now naming the option.
  const unsigned long long big = PyLong_AsUnsignedLongLong(index.ptr());
  if (PyErr_Occurred()) {
    PyErr_Clear();
    Fail(PyExc_OverflowError, option, "below 2**64", value);
  }
  return uint64_t(big);
}

OptionValue FromPython(const Target& option, nb::handle value) {
  switch (option.kind) {
    case OptionKind::kBool:
      if (!PyBool_Check(value.ptr())) Fail(PyExc_TypeError, option, "True or False", value);
      return nb::cast<bool>(value);
    case OptionKind::kUnsigned:
      return Unsigned(option, value, "an int", "an int >= 0");
    case OptionKind::kByteSize: {
      if (!PyUnicode_Check(value.ptr())) {
        return Unsigned(option, value, "bytes (an int) or text like '64MiB'", "bytes >= 0");
      }
      // The CLI's words for a bad size, after the option's name.
      const Result<uint64_t> bytes = ParseByteSize(nb::cast<std::string>(value));
      if (!bytes) ThrowStatus(bytes.error().WithContext(std::string(option.name)));
      return *bytes;
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
    case OptionKind::kTexts: {
      // One str, or a list or tuple of them (not bytes: patterns are text).
      if (PyUnicode_Check(value.ptr())) {
        return std::vector<std::string>{nb::cast<std::string>(value)};
      }
      if (!PyList_Check(value.ptr()) && !PyTuple_Check(value.ptr())) {
        Fail(PyExc_TypeError, option, "a str or a list of str", value);
      }
      std::vector<std::string> texts;
      for (Py_ssize_t i = 0; i < PySequence_Size(value.ptr()); ++i) {
        nb::object item = nb::steal(PySequence_GetItem(value.ptr(), i));
        if (!item.is_valid()) throw nb::python_error();
        if (!PyUnicode_Check(item.ptr())) Fail(PyExc_TypeError, option, "a list of str", value);
        texts.push_back(nb::cast<std::string>(item));
      }
      return texts;
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
  if (ec != std::errc()) return v;
  return ParseDouble(std::string_view(buf, end)).value_or(v);
}

}  // namespace

OptionValue OptionFromPython(std::string_view name, OptionKind kind,
                             std::span<const std::string_view> choices, nb::handle value) {
  return FromPython(Target{name, kind, choices}, value);
}

nb::object OptionToPython(OptionKind kind, const OptionValue& v) {
  if (std::holds_alternative<std::monostate>(v)) return nb::none();
  switch (kind) {
    case OptionKind::kBool:
      return nb::cast(std::get<bool>(v));
    case OptionKind::kUnsigned:
    case OptionKind::kByteSize:
      return nb::cast(std::get<uint64_t>(v));
    case OptionKind::kNumber:
      return nb::cast(std::get<double>(v));
    case OptionKind::kChoice:
      return nb::cast(std::get<std::string>(v));
    case OptionKind::kTexts: {
      nb::list texts;
      for (const std::string& t : std::get<std::vector<std::string>>(v)) texts.append(t);
      return texts;
    }
    case OptionKind::kPair:
    case OptionKind::kTriple:
    case OptionKind::kSize:
      break;
  }
  const std::vector<double>& values = std::get<std::vector<double>>(v);
  if (kind == OptionKind::kSize) {
    const auto h = int64_t(values[0]), w = int64_t(values[1]);
    return h == w ? nb::cast(h) : nb::object(nb::make_tuple(h, w));
  }
  nb::list items;
  for (const double x : values) {
    items.append(kind == OptionKind::kTriple ? ShortestFloat32(x) : x);
  }
  return nb::tuple(items);
}

}  // namespace stoker::python
