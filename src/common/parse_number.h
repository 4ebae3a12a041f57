// Whole-string unsigned numbers, with no exception, locale or sign: the one way stoker reads a
// number out of text it did not write itself (flags, environment variables, names, headers).
#pragma once

#include <charconv>
#include <concepts>
#include <optional>
#include <string_view>

namespace stoker {

// The value of `text` in `base`, or nullopt unless every character is one of its digits and the
// value fits T ("", "+1", "-1", " 1", "1x" and overflow are nullopt).
template <std::unsigned_integral T>
std::optional<T> ParseUnsigned(std::string_view text, int base = 10) {
  T value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace stoker
