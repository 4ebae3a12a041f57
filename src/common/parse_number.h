// Whole-string numbers, with no exception or locale: the one way stoker reads a number out of
// text (flags, environment variables, names, headers, text columns).
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

// The double `text` spells (decimal or exponent form, "inf", "nan"; a leading '-' but no '+',
// blank or "0x"), or nullopt unless all of it is that number and it is in range.
std::optional<double> ParseDouble(std::string_view text);

// ParseDouble by strtod in the "C" locale: what ParseDouble uses where the C++ library has no
// floating-point from_chars (libc++, the manylinux wheel's toolchain). Here so that the tests
// compare it with from_chars on every build.
std::optional<double> ParseDoubleWithStrtod(std::string_view text);

}  // namespace stoker
