// Python values <-> the transform's option table (decode/transform_option_table.h): the one
// place that turns a keyword argument of stoker.ImageLoader into a TransformOptions field.
#pragma once

#include <span>
#include <string_view>

#include <nanobind/nanobind.h>

#include "decode/transform_option_table.h"

namespace stoker::python {

// Sets every transform option in `values` (keyword -> Python value), each converted as its
// kind says; None leaves the default. Keys in `other_keys` belong to the caller and are
// skipped; any other unknown key is a KeyError, so that a misspelt option is never ignored.
// TypeError / ValueError naming the option for a value of the wrong type or range.
void SetTransformOptions(const nanobind::dict& values, std::span<const char* const> other_keys,
                         decode::TransformOptions& options);

// `option`'s value in `options`, as Python sees it: bool, int, float, str, a tuple of floats,
// or for a size an int when square, else (height, width).
nanobind::object TransformOptionValue(const decode::TransformOption& option,
                                      const decode::TransformOptions& options);

std::string_view KindName(decode::OptionKind kind);

}  // namespace stoker::python
