// Reading and writing a whole small file (a version record, a MANIFEST, gc's notes, a writer's
// lease) in one go.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "stoker/storage.h"

namespace stoker::storage {

// The file's bytes; Corruption if it is over `limit` bytes (a damaged or hostile store must not
// make a reader allocate without bound).
Result<std::string> ReadSmallFile(Storage& storage, std::string_view path, uint64_t limit);

// Creates (or truncates) `path` holding `bytes`, synced and closed.
Status WriteSmallFile(Storage& storage, std::string_view path, std::string_view bytes);

}  // namespace stoker::storage
