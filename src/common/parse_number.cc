#include "common/parse_number.h"

#include <cctype>
#include <cerrno>
#include <clocale>
#include <cmath>
#include <cstdlib>
#include <string>

namespace stoker {

std::optional<double> ParseDouble(std::string_view text) {
#if defined(__cpp_lib_to_chars)
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
#else
  return ParseDoubleWithStrtod(text);
#endif
}

std::optional<double> ParseDoubleWithStrtod(std::string_view text) {
  // Refuse first what from_chars refuses and strtod would take: a blank, '+', hexadecimal.
  const std::string_view digits = text.substr(text.starts_with('-') ? 1 : 0);
  if (digits.empty() || digits[0] == '+' || digits[0] == '-' ||
      std::isspace(static_cast<unsigned char>(digits[0])) ||
      (digits.size() > 1 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X'))) {
    return std::nullopt;
  }
  // Not the process's locale: a decimal comma there must not change what a file says.
  static const locale_t c_locale = newlocale(LC_ALL_MASK, "C", nullptr);
  const std::string terminated(text);
  char* end = nullptr;
  errno = 0;
  const double value = strtod_l(terminated.c_str(), &end, c_locale);
  if (end != terminated.c_str() + terminated.size()) return std::nullopt;
  // ERANGE also flags a subnormal result, which from_chars gives; only overflow to infinity and
  // underflow to zero are out of range.
  if (errno == ERANGE && (std::isinf(value) || value == 0)) return std::nullopt;
  return value;
}

}  // namespace stoker
