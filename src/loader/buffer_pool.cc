#include "loader/buffer_pool.h"

#include <algorithm>

namespace stoker::loader {
namespace {

constexpr std::align_val_t kBufferAlignment{64};

}  // namespace

BufferPool::~BufferPool() {
  for (std::byte* p : free_) ::operator delete(p, kBufferAlignment);
}

std::shared_ptr<std::byte> BufferPool::Acquire() {
  std::byte* p = nullptr;
  {
    std::lock_guard lock(mu_);
    if (!free_.empty()) {
      p = free_.back();
      free_.pop_back();
    }
  }
  if (p == nullptr) {
    p = static_cast<std::byte*>(::operator new(std::max<size_t>(bytes_, 1), kBufferAlignment));
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
