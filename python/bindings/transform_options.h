// Python values <-> the transform's option table (decode/transform_option_table.h): the one
// place that turns a keyword argument of stoker.ImageLoader into a TransformOptions field.
#pragma once

#include <string_view>

#include <nanobind/nanobind.h>

#include "decode/transform_option_table.h"

namespace stoker::python {

// Converts `value` as `option`'s kind says and writes it into `options`. None leaves the
// default. TypeError / ValueError naming the option for a value of the wrong type or range.
void SetTransformOption(const decode::TransformOption& option, nanobind::handle value,
                        decode::TransformOptions& options);

// `option`'s value in `options`, as Python sees it: bool, int, float, str, a tuple of floats,
// or for a size an int when square, else (height, width).
nanobind::object TransformOptionValue(const decode::TransformOption& option,
                                      const decode::TransformOptions& options);

std::string_view KindName(decode::OptionKind kind);

}  // namespace stoker::python
