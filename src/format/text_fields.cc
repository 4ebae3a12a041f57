#include "format/text_fields.h"

#include <charconv>

#include <fmt/format.h>

namespace stoker::format {

Result<std::string_view> TakeField(std::string_view& text, std::string_view key,
                                   std::string_view record) {
  const auto nl = text.find('\n');
  if (nl == std::string_view::npos) {
    return Err(Status::Corruption(fmt::format("{}: missing line '{}'", record, key)));
  }
  std::string_view line = text.substr(0, nl);
  text.remove_prefix(nl + 1);
  if (!line.starts_with(key) || line.size() <= key.size() + 1 || line[key.size()] != ' ') {
    // Escaped: the line may be damaged bytes, which a message must not pass on raw.
    return Err(Status::Corruption(
        fmt::format("{}: expected '{} ...', got {:?}", record, key, line.substr(0, 80))));
  }
  return line.substr(key.size() + 1);
}

Result<uint64_t> ParseNumber(std::string_view s, int base, std::string_view what,
                             std::string_view record) {
  uint64_t value = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value, base);
  const bool leading_zero = base == 10 && s.size() > 1 && s[0] == '0';
  // Lowercase only: from_chars also takes 'A'-'F', and a flipped 0x20 bit in the final CRC line
  // (covered by no CRC) would otherwise still parse to the same value.
  const bool uppercase = base == 16 && s.find_first_of("ABCDEF") != std::string_view::npos;
  if (ec != std::errc() || ptr != s.data() + s.size() || leading_zero || uppercase || s.empty()) {
    return Err(Status::Corruption(fmt::format("{}: bad {} '{}'", record, what, s.substr(0, 40))));
  }
  return value;
}

}  // namespace stoker::format
