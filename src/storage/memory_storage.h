// An in-memory Storage for tests: fast, hermetic, and inspectable (tests reach in to corrupt
// or truncate stored bytes). Files become visible when created, like POSIX.
#pragma once

#include <memory>
#include <string>

#include "stoker/storage.h"

namespace stoker::storage {

class MemoryStorage : public Storage {
 public:
  MemoryStorage();
  ~MemoryStorage() override;

  Result<std::unique_ptr<RandomAccessFile>> OpenRead(std::string_view path) override;
  Result<std::unique_ptr<WritableFile>> Create(std::string_view path) override;
  Result<std::shared_ptr<const FileBytes>> Map(std::string_view path) override;
  Status Rename(std::string_view from, std::string_view to) override;
  Status CreateExclusive(std::string_view path, std::span<const std::byte> bytes) override;
  Status Remove(std::string_view path) override;
  Status CreateDirs(std::string_view path) override;
  Status SyncDir(std::string_view path) override;
  Result<std::vector<std::string>> List(std::string_view path) override;
  Result<bool> Exists(std::string_view path) override;
  std::string Describe(std::string_view path) const override;

  // Test hooks: the current contents of a file, and replacing them (open readers keep the
  // bytes they had; new opens see the new bytes).
  Result<std::string> GetContents(std::string_view path) const;
  void SetContents(std::string_view path, std::string contents);

  struct State;  // shared with the file objects handed out

 private:
  std::shared_ptr<State> state_;
};

}  // namespace stoker::storage
