#include "loader/buffer_pool.h"

#include <algorithm>
#include <new>

#include <fmt/format.h>

namespace stoker::loader {
namespace {

constexpr std::align_val_t kBufferAlignment{64};

}  // namespace

BufferPool::~BufferPool() {
  for (std::byte* p : free_) ::operator delete(p, kBufferAlignment);
}

Result<std::shared_ptr<std::byte>> BufferPool::Acquire() {
  std::byte* p = nullptr;
  {
    std::lock_guard lock(mu_);
    if (!free_.empty()) {
      p = free_.back();
      free_.pop_back();
    }
  }
  if (p == nullptr) {
    p = static_cast<std::byte*>(
        ::operator new(std::max<size_t>(bytes_, 1), kBufferAlignment, std::nothrow));
    if (p == nullptr) {
      return Err(Status::ResourceExhausted(fmt::format(
          "cannot allocate a batch of {} bytes (batch_size x channels x size x 4 for float32): "
          "a smaller batch_size or size",
          bytes_)));
    }
  }
  return std::shared_ptr<std::byte>(p, [pool = weak_from_this()](std::byte* q) {
    if (auto self = pool.lock()) {
      self->Release(q);
    } else {
      ::operator delete(q, kBufferAlignment);
    }
  });
}

void BufferPool::Release(std::byte* p) {
  {
    std::lock_guard lock(mu_);
    if (free_.size() < max_free_) {
      free_.push_back(p);
      return;
    }
  }
  ::operator delete(p, kBufferAlignment);
}

}  // namespace stoker::loader
