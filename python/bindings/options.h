// Python values <-> option tables (common/option_table.h): the one place that turns a keyword
// argument into an options field, for every table (stoker.ImageLoader's transform options,
// stoker.pack's options, stoker.Loader's options).
#pragma once

#include <Python.h>

#include <algorithm>
#include <span>
#include <string>
#include <string_view>

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "common/option_table.h"
#include "errors.h"

namespace stoker::python {

// `value` as an option of `kind` named `name` takes it; None is not a value here. TypeError /
// ValueError naming the option for a value of the wrong type or range. A byte size is an int
// or text like "64MiB" (ParseByteSize).
OptionValue OptionFromPython(std::string_view name, OptionKind kind,
                             std::span<const std::string_view> choices, nanobind::handle value);

// An option's value as Python sees it: bool, int, float, str, a tuple of floats, or for a size
// an int when square, else (height, width); None when unset (std::monostate).
nanobind::object OptionToPython(OptionKind kind, const OptionValue& value);

// How a key that names no option is refused: the exception, and the words before the key.
struct UnknownKey {
  PyObject* type;
  std::string_view message;
};

// Sets every option of `table` in `values` (keyword -> Python value), each converted as its
// kind says; None leaves the default. Keys in `other_keys` belong to the caller and are
// skipped; any other unknown key is refused as `unknown` says, so that a misspelt option is
// never ignored.
template <typename Options>
void SetOptions(const nanobind::dict& values, std::span<const char* const> other_keys,
                std::span<const Option<Options>> table, const UnknownKey& unknown,
                Options& options) {
  for (const auto& [key, value] : values) {
    const std::string name = nanobind::cast<std::string>(key);
    if (std::ranges::find(other_keys, name) != other_keys.end()) continue;
    const Option<Options>* option = FindOption(table, name);
    if (option == nullptr) {
      PyErr_SetString(unknown.type, (std::string(unknown.message) + name).c_str());
      throw nanobind::python_error();
    }
    if (value.is_none()) continue;
    // A negative number for an option that refuses 0 too gets the option's own lower bound
    // ("window must be at least 1 ..."), not the type's ("an int >= 0"), which 0 would fail.
    if ((option->kind == OptionKind::kUnsigned || option->kind == OptionKind::kByteSize) &&
        PyLong_Check(value.ptr()) && !PyBool_Check(value.ptr()) &&
        PyObject_RichCompareBool(value.ptr(), nanobind::int_(0).ptr(), Py_LT) == 1) {
      Options probe = options;
      if (const Status st = option->set(probe, uint64_t{0}); !st.ok()) {
        const std::string message = std::string(st.message()) + ", not " +
                                    nanobind::cast<std::string>(nanobind::repr(value));
        PyErr_SetString(PyExc_ValueError, message.c_str());
        throw nanobind::python_error();
      }
    }
    // The setter's message names the option ("size must be whole pixels >= 1, not 10.5").
    ThrowIfError(
        option->set(options, OptionFromPython(name, option->kind, option->choices, value)));
  }
}

// {name: value} of every option of `table` in `options`.
template <typename Options>
nanobind::dict OptionValues(std::span<const Option<Options>> table, const Options& options) {
  nanobind::dict out;
  for (const Option<Options>& option : table) {
    out[nanobind::str(option.name.data(), option.name.size())] =
        OptionToPython(option.kind, option.get(options));
  }
  return out;
}

// The table for scripts/gen_options.py: a dict per option, with name, kind (OptionKindName),
// doc, choices, default (as Python sees it) and text (the default as a command line writes
// it: "64MiB").
template <typename Options>
nanobind::list DescribeOptions(std::span<const Option<Options>> table) {
  const Options defaults;
  nanobind::list out;
  for (const Option<Options>& option : table) {
    nanobind::dict d;
    d["name"] = std::string(option.name);
    d["kind"] = std::string(OptionKindName(option.kind));
    d["doc"] = std::string(option.doc);
    nanobind::list choices;
    for (const std::string_view c : option.choices) choices.append(std::string(c));
    d["choices"] = choices;
    const OptionValue value = option.get(defaults);
    d["default"] = OptionToPython(option.kind, value);
    d["text"] = OptionText(option.kind, value);
    out.append(d);
  }
  return out;
}

}  // namespace stoker::python
