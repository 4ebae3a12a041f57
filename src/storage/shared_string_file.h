// A file whose bytes are a shared, immutable string: what the in-memory storages (memory_storage,
// power_loss_storage) hand readers. A writer swaps in a new string, so an open reader keeps the
// bytes it opened, as a POSIX reader of a file replaced by rename does.
#pragma once

#include <algorithm>
#include <memory>
#include <span>
#include <string>

#include "stoker/storage.h"

namespace stoker::storage {

class SharedStringFile final : public RandomAccessFile, public FileBytes {
 public:
  SharedStringFile(std::shared_ptr<const std::string> data, std::string name)
      : data_(std::move(data)), name_(std::move(name)) {}
  uint64_t Size() const override { return data_->size(); }
  Status ReadAt(uint64_t offset, std::span<std::byte> dst) const override {
    if (offset > data_->size() || dst.size() > data_->size() - offset) {
      return Status::IOError("read past the end of " + name_);
    }
    std::copy_n(data_->data() + offset, dst.size(), reinterpret_cast<char*>(dst.data()));
    return Status::OK();
  }
  std::span<const std::byte> bytes() const override {
    return {reinterpret_cast<const std::byte*>(data_->data()), data_->size()};
  }

 private:
  std::shared_ptr<const std::string> data_;
  std::string name_;
};

}  // namespace stoker::storage
