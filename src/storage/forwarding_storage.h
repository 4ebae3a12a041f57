// A Storage that passes every call to another: the base of wrappers that change a few calls
// (FaultStorage injects faults into reads, the node daemon's NodeStorage reads chunk files
// through the daemon) and must forward the rest unchanged. Thread-safe if the base is.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/storage.h"

namespace stoker::storage {

class ForwardingStorage : public Storage {
 public:
  explicit ForwardingStorage(std::shared_ptr<Storage> base) : base_(std::move(base)) {}

  Result<std::unique_ptr<RandomAccessFile>> OpenRead(std::string_view path) override {
    return base_->OpenRead(path);
  }
  Result<std::unique_ptr<WritableFile>> Create(std::string_view path) override {
    return base_->Create(path);
  }
  Result<std::shared_ptr<const FileBytes>> Map(std::string_view path) override {
    return base_->Map(path);
  }
  Status Rename(std::string_view from, std::string_view to) override {
    return base_->Rename(from, to);
  }
  Status CreateExclusive(std::string_view path, std::span<const std::byte> bytes) override {
    return base_->CreateExclusive(path, bytes);
  }
  Status Remove(std::string_view path) override { return base_->Remove(path); }
  Status CreateDirs(std::string_view path) override { return base_->CreateDirs(path); }
  Status SyncDir(std::string_view path) override { return base_->SyncDir(path); }
  Result<std::vector<std::string>> List(std::string_view path) override {
    return base_->List(path);
  }
  Result<bool> Exists(std::string_view path) override { return base_->Exists(path); }
  std::string Describe(std::string_view path) const override { return base_->Describe(path); }
  uint64_t WriteBufferBytes() const override { return base_->WriteBufferBytes(); }
  void AdviseReadOrder(std::span<const PlannedFile> plan) override { base_->AdviseReadOrder(plan); }

 protected:
  const std::shared_ptr<Storage>& base() const { return base_; }

 private:
  std::shared_ptr<Storage> base_;
};

}  // namespace stoker::storage
