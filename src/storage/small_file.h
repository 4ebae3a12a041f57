// Reading a whole small file (a version record, a MANIFEST) in one go.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "stoker/storage.h"

namespace stoker::storage {

// The file's bytes; Corruption if it is over `limit` bytes (a damaged or hostile store must not
// make a reader allocate without bound).
Result<std::string> ReadSmallFile(Storage& storage, std::string_view path, uint64_t limit);

}  // namespace stoker::storage
