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

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "decode/transform.h"
#include "stoker/status.h"

namespace stoker::decode {

enum class OptionKind : uint8_t {
  kBool,      // bool
  kUnsigned,  // uint64_t
  kNumber,    // double
  kChoice,    // std::string, one of `choices`
  kPair,      // two numbers (a single number x means (x, x))
  kTriple,    // three numbers, one per channel (stored as float32)
  kSize,      // (height, width) in pixels (a single number n means (n, n))
};

// A value of any kind: vector<double> holds pairs, triples and sizes.
using OptionValue = std::variant<bool, uint64_t, double, std::string, std::vector<double>>;

struct TransformOption {
  std::string_view name;  // the Python keyword argument
  OptionKind kind;
  std::string_view doc;                   // one sentence or two, for the docstring and docs
  std::vector<std::string_view> choices;  // kChoice only
  // Writes `value` (already of the option's kind and arity) into `options`. InvalidArgument
  // for a value the field cannot hold (a size that is not a whole number of pixels, ...);
  // ranges that depend on other options are TransformOptions::Validate's.
  Status (*set)(TransformOptions& options, const OptionValue& value);
  OptionValue (*get)(const TransformOptions& options);
};

// Every option, in the order the signature and the docs list them.
std::span<const TransformOption> TransformOptionTable();

// The entry named `name`, or nullptr.
const TransformOption* FindTransformOption(std::string_view name);

}  // namespace stoker::decode
