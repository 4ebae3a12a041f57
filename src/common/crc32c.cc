#include "common/crc32c.h"

#include <isa-l/crc.h>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define STOKER_ASAN 1
#endif
#elif defined(__SANITIZE_ADDRESS__)
#define STOKER_ASAN 1
#endif
#ifdef STOKER_ASAN
#include <sanitizer/asan_interface.h>

#include <cstdlib>
#endif

namespace stoker::crc32c {

// ISA-L's crc32_iscsi takes and returns the CRC register without the final inversion that the
// standard CRC32C (RFC 3720) applies, so we invert on the way in and out. Result: the textbook
// value (CRC32C("123456789") == 0xE3069283), matching every other CRC32C implementation.
uint32_t Extend(uint32_t crc, const void* data, size_t n) {
  auto* bytes = static_cast<unsigned char*>(const_cast<void*>(data));  // ISA-L lacks const
#ifdef STOKER_ASAN
  // ISA-L is uninstrumented assembly, so AddressSanitizer cannot see its reads; check the range
  // here, or an out-of-bounds CRC in a sanitizer build or fuzzer would go unnoticed.
  if (n > 0) {
    if (void* bad = __asan_region_is_poisoned(bytes, n)) {
      __sanitizer_print_stack_trace();
      __asan_describe_address(bad);
      std::abort();
    }
  }
#endif
  uint32_t value = ~crc;
  // ISA-L takes an int length; feed huge buffers in pieces.
  constexpr size_t kMaxPiece = size_t{1} << 30;
  while (n > 0) {
    const size_t piece = n < kMaxPiece ? n : kMaxPiece;
    value = crc32_iscsi(bytes, static_cast<int>(piece), value);
    bytes += piece;
    n -= piece;
  }
  return ~value;
}

}  // namespace stoker::crc32c
