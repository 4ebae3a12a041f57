// Strict parsing of stoker's small text records (MANIFEST of format 1, version records of
// format 2): "<key> <value>\n" lines in a fixed order, decimal without leading zeros, lowercase
// hex. Strictness is what makes a damaged record read as corruption instead of as other data.
#pragma once

#include <cstdint>
#include <string_view>

#include "stoker/status.h"

namespace stoker::format {

// Takes "<key> <value>\n" off the front of `text`; `record` names the file in errors.
Result<std::string_view> TakeField(std::string_view& text, std::string_view key,
                                   std::string_view record);

// A decimal (base 10) or lowercase hex (base 16) number filling all of `s`.
Result<uint64_t> ParseNumber(std::string_view s, int base, std::string_view what,
                             std::string_view record);

}  // namespace stoker::format
