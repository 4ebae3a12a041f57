// CRC32C (Castagnoli), the checksum on every stored and transmitted byte in stoker.
// Backed by ISA-L's crc32_iscsi (SSE4.2/PCLMUL where the CPU has them). Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace stoker::crc32c {

// CRC32C of `data`, continuing from `crc` (the value returned for the preceding bytes; 0 to
// start). Extend(Extend(0, a), b) == Value(a ++ b).
uint32_t Extend(uint32_t crc, const void* data, size_t n);

inline uint32_t Value(const void* data, size_t n) { return Extend(0, data, n); }
inline uint32_t Value(std::span<const std::byte> data) {
  return Extend(0, data.data(), data.size());
}
inline uint32_t Value(std::string_view data) { return Extend(0, data.data(), data.size()); }

}  // namespace stoker::crc32c
