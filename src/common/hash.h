// The 64-bit hash used by on-storage hash tables: XXH3_64bits with seed 0 (xxHash >= 0.8).
// It is part of the metadata format, so it must never change. Thread-safe.
#pragma once

#include <cstdint>
#include <string_view>

#include <xxhash.h>

namespace stoker {

inline uint64_t Hash64(std::string_view bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

}  // namespace stoker
