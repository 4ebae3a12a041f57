// LEB128 variable-length unsigned integers (7 bits per byte, low group first, high bit set on
// every byte but the last), as in protobuf and LevelDB. Used by the block-structured metadata
// of format 2 (docs/format.md §3), where most numbers are small.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

namespace stoker::varint {

inline constexpr size_t kMaxBytes = 10;

inline void Put(std::string* dst, uint64_t value) {
  while (value >= 0x80) {
    dst->push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  dst->push_back(static_cast<char>(value));
}

// Reads one varint from the front of `*in` and advances it; nullopt on a truncated or
// over-long encoding (more than 10 bytes, or bits beyond 64).
inline std::optional<uint64_t> Get(std::string_view* in) {
  uint64_t value = 0;
  for (size_t i = 0; i < kMaxBytes && i < in->size(); ++i) {
    const auto byte = static_cast<uint8_t>((*in)[i]);
    if (i == kMaxBytes - 1 && byte > 1) return std::nullopt;
    value |= uint64_t{byte & 0x7Fu} << (7 * i);
    if ((byte & 0x80) == 0) {
      in->remove_prefix(i + 1);
      return value;
    }
  }
  return std::nullopt;
}

// Reads a varint from bytes this process wrote itself moments ago (a spool record, a sort run):
// one that does not parse means memory or a temporary file was damaged, not that the input was
// bad, so the process stops with a message rather than write a dataset from damaged metadata.
// Input from files, peers or users goes through Get.
inline uint64_t GetOwn(std::string_view* in) {
  const std::optional<uint64_t> value = Get(in);
  if (!value) {
    std::fputs(
        "stoker: a temporary record this process wrote does not parse (damaged memory or "
        "temporary file); stopping\n",
        stderr);
    std::abort();
  }
  return *value;
}

}  // namespace stoker::varint
