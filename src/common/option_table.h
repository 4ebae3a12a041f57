// What an option table is made of: user-facing options each described once (name, kind, doc,
// and how it reads and writes a plain options struct, whose field default is the option's).
// The front ends derive the rest from a table: the Python bindings convert keyword arguments
// per kind (python/bindings/options.h), the CLI registers its flags from one
// (tools/option_flags.h), and scripts/gen_options.py writes the signatures and docs tables.
// The tables: decode/transform_option_table.h (stoker.ImageLoader), dataset/pack_option_table.h
// (`stoker pack`, stoker.pack), loader/loader_option_table.h (stoker.Loader).
//
// Thread-safety: tables are immutable; the functions are pure.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "stoker/status.h"

namespace stoker {

enum class OptionKind : uint8_t {
  kBool,      // bool
  kUnsigned,  // uint64_t
  kNumber,    // double
  kChoice,    // std::string, one of `choices`
  kPair,      // two numbers (a single number x means (x, x))
  kTriple,    // three numbers, one per channel (stored as float32)
  kSize,      // (height, width) in pixels (a single number n means (n, n))
  kByteSize,  // uint64_t bytes, given as a number or as text like "64MiB" (ParseByteSize)
  kTexts,     // std::vector<std::string>: a repeatable flag (each use adds one), a list in Python
};

// A value of any kind: vector<double> holds pairs, triples and sizes, vector<string> texts.
// std::monostate is "unset" (Python's None): the value of a nullable option, one whose field is a
// std::optional that the front end fills in when it is left out (stoker.Loader's rank: torchrun's
// RANK).
using OptionValue = std::variant<bool, uint64_t, double, std::string, std::vector<double>,
                                 std::monostate, std::vector<std::string>>;

template <typename Options>
struct Option {
  std::string_view name;  // the Python keyword argument (a CLI flag is derived from it)
  OptionKind kind;
  std::string_view doc;                   // one sentence or two, for the docstring and docs
  std::vector<std::string_view> choices;  // kChoice only
  // Writes `value` (already of the option's kind and arity, or std::monostate for a nullable
  // option: unset it) into `options`. InvalidArgument for a value the field cannot hold (a size
  // that is not a whole number of pixels, ...); ranges that depend on other options are the
  // options struct's Validate's.
  Status (*set)(Options& options, const OptionValue& value);
  // The field's value; std::monostate when a nullable option is unset.
  OptionValue (*get)(const Options& options);
};

// The entry of `table` named `name`, or nullptr.
template <typename Options>
const Option<Options>* FindOption(std::span<const Option<Options>> table, std::string_view name) {
  for (const Option<Options>& option : table) {
    if (option.name == name) return &option;
  }
  return nullptr;
}

// The value that `text` (as a command line gives it) means for an option of `kind`: "true" /
// "false" for kBool, a whole number for kUnsigned, a byte size for kByteSize, one of `choices`
// for kChoice, a list of that one text for kTexts. InvalidArgument saying what was expected; the
// caller names the option. Kinds of several numbers have no text form here (no CLI flag takes one):
// InvalidArgument.
Result<OptionValue> ParseOptionText(OptionKind kind, std::span<const std::string_view> choices,
                                    std::string_view text);

// `value` as ParseOptionText reads it back ("64MiB" for a byte size of 64 << 20), for help
// texts and docs; numbers of a pair or triple joined by ", ", texts by " "; "" when unset
// (std::monostate): no text means it.
std::string OptionText(OptionKind kind, const OptionValue& value);

// Every option of `table` as "name=value" lines (OptionText), in the table's order: how options
// travel between processes (a feeder makes a trainer's images with the trainer's transform).
// Numbers are written as the shortest text that reads back the same double, so a value read
// back by ParseOptionsText is bit for bit the one written.
template <typename Options>
std::string OptionsText(std::span<const Option<Options>> table, const Options& options) {
  std::string out;
  for (const Option<Options>& option : table) {
    out.append(option.name).append("=");
    out.append(OptionText(option.kind, option.get(options))).append("\n");
  }
  return out;
}

// `options` with the values of OptionsText's lines written into it (an option not named keeps
// its value). InvalidArgument naming the option for an unknown name, a line without '=', or a
// value its kind cannot read.
template <typename Options>
Status ParseOptionsText(std::span<const Option<Options>> table, std::string_view text,
                        Options& options) {
  while (!text.empty()) {
    const size_t end = std::min(text.find('\n'), text.size());
    const std::string_view line = text.substr(0, end);
    text.remove_prefix(std::min(end + 1, text.size()));
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) {
      return Status::InvalidArgument("option line without '=': '" + std::string(line) + "'");
    }
    const std::string_view name = line.substr(0, eq);
    const Option<Options>* option = FindOption(table, name);
    if (option == nullptr) {
      return Status::InvalidArgument("unknown option '" + std::string(name) + "'");
    }
    const std::string_view value = line.substr(eq + 1);
    Result<OptionValue> parsed = value.empty()
                                     ? Result<OptionValue>(OptionValue(std::monostate{}))
                                     : ParseOptionText(option->kind, option->choices, value);
    if (!parsed) return parsed.error().WithContext(name);
    STOKER_RETURN_IF_ERROR(option->set(options, *parsed).WithContext(name));
  }
  return Status::OK();
}

// "bool", "unsigned", ...: the kind's name in Python's view of a table and in the docs.
std::string_view OptionKindName(OptionKind kind);

}  // namespace stoker
