// ParseManifest on arbitrary bytes. Besides never crashing, the parser is strict by contract
// (manifest.h): one canonical text per value. So whatever it accepts must re-encode to exactly
// the input, and the re-encoding must parse back to the same values.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "format/manifest.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stoker::format;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = ParseManifest(text);
  if (!parsed) return 0;
  const std::string encoded = EncodeManifest(*parsed);
  auto again = ParseManifest(encoded);
  FUZZ_CHECK(again.has_value());
  FUZZ_CHECK(again->version == parsed->version);
  FUZZ_CHECK(again->snapshot_path == parsed->snapshot_path);
  FUZZ_CHECK(again->snapshot_bytes == parsed->snapshot_bytes);
  FUZZ_CHECK(again->snapshot_crc32c == parsed->snapshot_crc32c);
  FUZZ_CHECK(encoded == text);
  return 0;
}
