// Little-endian fixed-width encoding for on-storage formats. stoker's formats are little-endian
// on every platform; these helpers are the only place that knows it.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>

namespace stoker::coding {

static_assert(std::endian::native == std::endian::little,
              "stoker's formats are read by memcpy into little-endian structs");

template <typename T>
inline void PutFixed(std::string* dst, T value) {
  char buf[sizeof(T)];
  std::memcpy(buf, &value, sizeof(T));
  dst->append(buf, sizeof(T));
}

template <typename T>
inline T DecodeFixed(const void* src) {
  T value;
  std::memcpy(&value, src, sizeof(T));
  return value;
}

template <typename T>
inline void EncodeFixed(void* dst, T value) {
  std::memcpy(dst, &value, sizeof(T));
}

}  // namespace stoker::coding
