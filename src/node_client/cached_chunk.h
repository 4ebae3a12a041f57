// One chunk file's bytes in a sealed memfd: what the node daemon caches, sends to peers, and
// hands to trainer processes as a file descriptor (they map it read-only; no byte is copied
// through a socket). Sealing (no write, no resize) is what lets a trainer trust that the bytes
// it mapped can never change under it, even after the daemon evicts the chunk or dies.
//
// Thread-safety: immutable once sealed; bytes() may be read from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "stoker/status.h"

namespace stoker::node {

class CachedChunk {
 public:
  // A writable memfd of `size` bytes, named `name` (visible in /proc/PID/fd for debugging).
  // `live_bytes`, if given, counts the bytes of every CachedChunk alive (the daemon's memory cap).
  static Result<std::unique_ptr<CachedChunk>> Create(const std::string& name, uint64_t size,
                                                     std::atomic<uint64_t>* live_bytes);
  ~CachedChunk();
  CachedChunk(const CachedChunk&) = delete;
  CachedChunk& operator=(const CachedChunk&) = delete;

  uint64_t size() const { return size_; }
  int fd() const { return fd_; }
  // Before Seal(): the bytes to fill.
  std::span<std::byte> writable();
  // Drops write access for good (F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) and
  // maps the bytes read-only.
  Status Seal();
  std::span<const std::byte> bytes() const { return {data_, size_}; }

 private:
  CachedChunk(int fd, uint64_t size, std::byte* data, std::atomic<uint64_t>* live_bytes);
  int fd_;
  uint64_t size_;
  std::byte* data_;
  bool sealed_ = false;
  std::atomic<uint64_t>* live_bytes_;
};

// The seals a trainer requires of a descriptor before trusting it as an immutable chunk.
bool IsSealedChunk(int fd);

}  // namespace stoker::node
