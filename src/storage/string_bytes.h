// A file's bytes held in a string: what a backend that cannot memory-map answers Map with.
#pragma once

#include <span>
#include <string>

#include "stoker/storage.h"

namespace stoker::storage {

class StringBytes final : public FileBytes {
 public:
  explicit StringBytes(std::string s) : s_(std::move(s)) {}
  std::span<const std::byte> bytes() const override { return std::as_bytes(std::span(s_)); }

 private:
  std::string s_;
};

}  // namespace stoker::storage
