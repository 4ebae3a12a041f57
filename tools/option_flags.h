// A subcommand's flags made from an option table (common/option_table.h): one flag per entry,
// named after the option (chunk_size is --chunk-size), with its doc as help and its default
// shown. A bool option is a flag without a value; a texts option may be given several times,
// each adding one; any other takes text that ParseOptionText
// reads as the option's kind. A bad value is a usage error naming the flag.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include "common/option_table.h"

namespace stoker::cli {

// Whole numbers for unsigned flags: CLI11 reads "-1" into an unsigned as 2^64 - 1, and its own
// PositiveNumber says "Value 0 not in range 0.000000 to 1.79…e308". These refuse a sign and
// say what is wanted.
inline CLI::Validator WholeNumber(bool positive) {
  return CLI::Validator(
      [positive](std::string& text) -> std::string {
        const bool digits =
            !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
        if (!digits) return "'" + text + "' is not a whole number >= " + (positive ? "1" : "0");
        if (positive && text.find_first_not_of('0') == std::string::npos) {
          return "must be at least 1, not " + text;
        }
        return "";
      },
      positive ? "UINT>=1" : "UINT");
}

// --metrics-port of the daemons (serve, node, feed): a port, 0 for any free one; unset (-1) serves
// no metrics. A negative or too large port is a usage error, not metrics silently off.
inline CLI::Option* AddMetricsPortFlag(CLI::App& cmd, int& port) {
  return cmd
      .add_option("--metrics-port", port,
                  "serve Prometheus metrics on GET /metrics at this port (0: any free port)")
      ->check(CLI::Range(0, 65535));
}

// "--chunk-size" for "chunk_size".
inline std::string FlagName(std::string_view option_name) {
  std::string flag = "--" + std::string(option_name);
  for (char& c : flag) {
    if (c == '_') c = '-';
  }
  return flag;
}

// What --help shows for the value: "SIZE", "UINT", "{auto,none}".
inline std::string FlagTypeName(OptionKind kind, std::span<const std::string_view> choices) {
  switch (kind) {
    case OptionKind::kByteSize:
      return "SIZE";
    case OptionKind::kUnsigned:
      return "UINT";
    case OptionKind::kChoice: {
      std::string names;
      for (const std::string_view choice : choices) {
        names += (names.empty() ? "{" : ",") + std::string(choice);
      }
      return names + "}";
    }
    default:
      return "TEXT";
  }
}

// Adds a flag for every option of `table` to `cmd`; each writes into `options`, which must
// outlive the parse (the table is static).
template <typename Options>
void AddOptionFlags(CLI::App& cmd, std::span<const Option<Options>> table, Options& options) {
  for (const Option<Options>& option : table) {
    const std::string flag = FlagName(option.name);
    const auto set = [&option, &options, flag](const OptionValue& value) {
      if (const Status st = option.set(options, value); !st.ok()) {
        throw CLI::ValidationError(flag, std::string(st.message()));
      }
    };
    if (option.kind == OptionKind::kBool) {
      cmd.add_flag_callback(flag, [set] { set(true); }, std::string(option.doc));
      continue;
    }
    if (option.kind == OptionKind::kTexts) {  // repeatable: each use adds its text
      cmd.add_option_function<std::vector<std::string>>(
             flag, [set](const std::vector<std::string>& texts) { set(texts); },
             std::string(option.doc))
          ->type_name("TEXT")
          ->expected(1)
          ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
      continue;
    }
    cmd.add_option_function<std::string>(
           flag,
           [&option, set, flag](const std::string& text) {
             const Result<OptionValue> value = ParseOptionText(option.kind, option.choices, text);
             if (!value) throw CLI::ValidationError(flag, std::string(value.error().message()));
             set(*value);
           },
           std::string(option.doc))
        ->type_name(FlagTypeName(option.kind, option.choices))
        ->default_str(OptionText(option.kind, option.get(options)));
  }
}

}  // namespace stoker::cli
