// Storage that refuses every write: the base of the backends that only ever read (a web server,
// a node daemon's export to its peers). Each says why in ReadOnly(), which every write returns.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "stoker/storage.h"

namespace stoker::storage {

class ReadOnlyStorage : public Storage {
 public:
  Result<std::unique_ptr<WritableFile>> Create(std::string_view path) final {
    return Err(ReadOnly(path));
  }
  Status Rename(std::string_view from, std::string_view) final { return ReadOnly(from); }
  Status CreateExclusive(std::string_view path, std::span<const std::byte>) final {
    return ReadOnly(path);
  }
  Status Remove(std::string_view path) final { return ReadOnly(path); }
  Status CreateDirs(std::string_view path) final { return ReadOnly(path); }
  Status SyncDir(std::string_view path) final { return ReadOnly(path); }

 protected:
  // The error of a write to `path`: Unsupported, saying where writes go instead.
  virtual Status ReadOnly(std::string_view path) const = 0;
};

}  // namespace stoker::storage
