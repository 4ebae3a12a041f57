#include "common/crc32c.h"

#include <isa-l/crc.h>

namespace stoker::crc32c {

// ISA-L's crc32_iscsi takes and returns the CRC register without the final inversion that the
// standard CRC32C (RFC 3720) applies, so we invert on the way in and out. Result: the textbook
// value (CRC32C("123456789") == 0xE3069283), matching every other CRC32C implementation.
uint32_t Extend(uint32_t crc, const void* data, size_t n) {
  auto* bytes = static_cast<unsigned char*>(const_cast<void*>(data));  // ISA-L lacks const
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
