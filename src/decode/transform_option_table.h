// The transform's user-facing options, each described once: name, kind, default, doc, and how
// it reads and writes TransformOptions. Everything else is derived from this table:
//   - the Python bindings parse stoker.ImageLoader's keyword arguments with it
//     (python/bindings/image_pipeline.cc), naming the option in every error;
//   - stoker.ImageLoader's signature, defaults and docstring, and the option table in
//     docs/augment.md, are generated from it (scripts/gen_options.py; a test fails when they
//     are stale).
// Adding an option is a field in TransformOptions plus one entry in transform_option_table.cc.
//
// Thread-safety: the table is immutable; the functions are pure.
#pragma once

#include <span>
#include <string_view>

#include "common/option_table.h"
#include "decode/transform.h"

namespace stoker::decode {

// One entry; OptionKind and OptionValue are common/option_table.h's.
using TransformOption = Option<TransformOptions>;

// Every option, in the order the signature and the docs list them.
std::span<const TransformOption> TransformOptionTable();

// The entry named `name`, or nullptr.
const TransformOption* FindTransformOption(std::string_view name);

}  // namespace stoker::decode
