// ParseVersionRecord on arbitrary bytes. Strict by contract (version_record.h): whatever it
// accepts re-encodes to exactly the input.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "format/version_record.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stoker::format;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = ParseVersionRecord(text);
  if (!parsed) return 0;
  const std::string encoded = EncodeVersionRecord(*parsed);
  FUZZ_CHECK(encoded == text);
  auto again = ParseVersionRecord(encoded);
  FUZZ_CHECK(again.has_value() && *again == *parsed);
  return 0;
}
