// Batch buffers, recycled: a released buffer goes back to the free list if the pool still
// exists (buffers may outlive the pipeline inside tensors), and the list keeps a few at most.
// Buffers are 64-byte aligned (SIMD stores, pinned-memory copies). Thread-safe.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "stoker/status.h"

namespace stoker::loader {

class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  BufferPool(size_t bytes, size_t max_free) : bytes_(bytes), max_free_(max_free) {}
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A buffer of `bytes` (at least one byte, so an empty batch still has an address); it returns
  // to the pool when the last owner lets go. The pool must be owned by a shared_ptr.
  // ResourceExhausted when the memory cannot be had (never an exception: the dispatcher thread
  // that asks must not die of it).
  Result<std::shared_ptr<std::byte>> Acquire();

 private:
  void Release(std::byte* p);

  const size_t bytes_, max_free_;
  std::mutex mu_;
  std::vector<std::byte*> free_;
};

}  // namespace stoker::loader
