// One chunk file's bytes in a memfd: what the node daemon caches, sends to peers, and hands to
// trainer processes as a file descriptor (they map it read-only; no byte is copied through a
// socket).
//
// A chunk is handed out while it is still being filled (cut-through: store -> owner -> reader
// -> trainer without waiting for whole chunks at each hop). The memfd holds the chunk's bytes
// and, after them (at VerifiedMarkOffset(size)), a trailer: how many bytes from the start are
// verified, where a verified tail begins, and a count of changes that waiters sleep on (a
// shared futex, so a trainer process is woken by the daemon's filler). The filler moves these marks
// only over bytes already checked (format::ChunkStreamCheck: the header, the index and footer, each
// entry's CRC32C), so a reader never sees an unverified byte, and never a byte that changes later:
// the memfd is sealed against shrinking and growing from the start (a mapping can never fault) and
// against writing once the fill ends (the filler's writable mapping is dropped, and
// F_SEAL_FUTURE_WRITE | F_SEAL_SEAL refuse any new one).
//
// Thread-safety: the fill (writable(), the marks, Seal(), Fail()) from one thread; bytes(),
// verified(), WaitFor() from any thread and any process that maps the memfd.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "stoker/status.h"

namespace stoker::node {

// The trailer's offset in a chunk's memfd (the size rounded up to 64) and the memfd's size.
uint64_t VerifiedMarkOffset(uint64_t size);
uint64_t ChunkMemfdSize(uint64_t size);
// The verified mark of a fill that failed: readers stop waiting.
inline constexpr uint64_t kFillFailed = ~uint64_t{0};

// Waits until [offset, offset + n) of a chunk of `size` bytes is verified, reading the marks of
// `trailer` (the mapped trailer). Unavailable if the fill failed, made no progress for `stall`
// (the daemon is stuck: read the store instead), or — when `filler` is a socket to the process
// filling the chunk (>= 0) — that process is gone (a daemon killed mid-fill: its trainers read
// the store at once rather than after `stall`).
Status WaitForVerified(const std::byte* trailer, uint64_t size, uint64_t offset, uint64_t n,
                       std::chrono::milliseconds stall, int filler = -1);

class CachedChunk {
 public:
  // A memfd for a chunk of `size` bytes, named `name` (visible in /proc/PID/fd for debugging),
  // nothing verified yet. `live_bytes`, if given, counts the bytes of every CachedChunk alive
  // (the daemon's memory cap).
  static Result<std::unique_ptr<CachedChunk>> Create(const std::string& name, uint64_t size,
                                                     std::atomic<uint64_t>* live_bytes);
  ~CachedChunk();
  CachedChunk(const CachedChunk&) = delete;
  CachedChunk& operator=(const CachedChunk&) = delete;

  uint64_t size() const { return size_; }
  int fd() const { return fd_; }

  // The filler's side, until Seal() or Fail(): the bytes to write, and the marks (each only
  // ever moves forward: the prefix [0, bytes) and the tail [offset, size) are verified).
  std::span<std::byte> writable();
  void SetVerified(uint64_t bytes);
  void SetVerifiedTail(uint64_t offset);
  // The whole chunk is verified: marks it so and seals the memfd against writing.
  Status Seal();
  // The fill failed: readers waiting for bytes get an error.
  void Fail();

  // The chunk's bytes (read-only): read only what WaitFor() or complete() vouches for.
  std::span<const std::byte> bytes() const { return {rdata_, size_}; }
  uint64_t verified() const;  // the verified prefix, or kFillFailed
  bool complete() const { return verified() == size_; }
  Status WaitFor(uint64_t offset, uint64_t n, std::chrono::milliseconds stall,
                 int filler = -1) const;

 private:
  CachedChunk(int fd, uint64_t size, std::byte* wdata, std::byte* rdata,
              std::atomic<uint64_t>* live_bytes);
  uint64_t* mark(std::byte* base) const;
  int fd_;
  uint64_t size_;
  std::byte* wdata_;  // writable mapping, during the fill
  std::byte* rdata_;  // read-only mapping, for readers (never moves)
  std::atomic<uint64_t>* live_bytes_;
};

// A chunk descriptor as a daemon sends it, checked before a trainer maps it: sealed against
// shrinking and growing and as large as ChunkMemfdSize(size) (a chunk with marks, possibly
// still filling), or fully sealed and exactly `size` bytes (a daemon from before cut-through:
// complete). Which one, or nullopt for anything else.
enum class ChunkFdLayout { kWithMarks, kSealedWhole };
std::optional<ChunkFdLayout> CheckChunkFd(int fd, uint64_t size);

}  // namespace stoker::node
