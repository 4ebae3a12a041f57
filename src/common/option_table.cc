// See option_table.h.
#include "common/option_table.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/parse_number.h"
#include "common/progress.h"

namespace stoker {

Result<OptionValue> ParseOptionText(OptionKind kind, std::span<const std::string_view> choices,
                                    std::string_view text) {
  switch (kind) {
    case OptionKind::kBool:
      if (text == "true") return OptionValue(true);
      if (text == "false") return OptionValue(false);
      return Err(Status::InvalidArgument(fmt::format("'{}' is not true or false", text)));
    case OptionKind::kUnsigned:
      if (const auto n = ParseUnsigned<uint64_t>(text)) return OptionValue(*n);
      return Err(Status::InvalidArgument(fmt::format("'{}' is not a whole number >= 0", text)));
    case OptionKind::kByteSize: {
      STOKER_ASSIGN_OR_RETURN(const uint64_t bytes, ParseByteSize(text));
      return OptionValue(bytes);
    }
    case OptionKind::kChoice:
      for (const std::string_view choice : choices) {
        if (choice == text) return OptionValue(std::string(text));
      }
      return Err(Status::InvalidArgument(
          fmt::format("'{}' is not one of {}", text, fmt::join(choices, ", "))));
    case OptionKind::kTexts:
      return OptionValue(std::vector<std::string>{std::string(text)});
    case OptionKind::kNumber:
      if (const auto x = ParseDouble(text)) return OptionValue(*x);
      return Err(Status::InvalidArgument(fmt::format("'{}' is not a number", text)));
    case OptionKind::kPair:
    case OptionKind::kTriple:
    case OptionKind::kSize:
      break;
  }
  // Numbers as OptionText writes them: "0.08, 1" (the shortest text that reads back the same).
  std::vector<double> numbers;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    std::string_view piece = text.substr(start, comma - start);
    while (!piece.empty() && piece.front() == ' ') piece.remove_prefix(1);
    const auto x = ParseDouble(piece);
    if (!x) {
      return Err(Status::InvalidArgument(
          fmt::format("'{}' is not a list of numbers separated by ', '", text)));
    }
    numbers.push_back(*x);
    start = comma + 1;
  }
  return OptionValue(std::move(numbers));
}

std::string OptionText(OptionKind kind, const OptionValue& value) {
  if (std::holds_alternative<std::monostate>(value)) return "";
  switch (kind) {
    case OptionKind::kBool:
      return std::get<bool>(value) ? "true" : "false";
    case OptionKind::kUnsigned:
      return fmt::format("{}", std::get<uint64_t>(value));
    case OptionKind::kByteSize:
      return ByteSizeText(std::get<uint64_t>(value));
    case OptionKind::kNumber:
      return fmt::format("{}", std::get<double>(value));
    case OptionKind::kChoice:
      return std::get<std::string>(value);
    case OptionKind::kTexts:
      return fmt::format("{}", fmt::join(std::get<std::vector<std::string>>(value), " "));
    case OptionKind::kPair:
    case OptionKind::kTriple:
    case OptionKind::kSize:
      break;
  }
  return fmt::format("{}", fmt::join(std::get<std::vector<double>>(value), ", "));
}

std::string_view OptionKindName(OptionKind kind) {
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
    case OptionKind::kByteSize:
      return "byte size";
    case OptionKind::kTexts:
      return "texts";
  }
  return "unknown";
}

}  // namespace stoker
