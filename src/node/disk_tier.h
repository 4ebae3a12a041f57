// The node daemon's optional local-disk tier (`--disk-dir`, `--disk-limit`): chunk files on a
// local disk, between the memory cache and the network.
//
// Every chunk the daemon fills from a peer or the store is also written here while there is
// room; a miss in memory reads it back from here first. Once full, the tier keeps what it has:
// with a dataset larger than memory + disk and a new random order every epoch, a stable resident
// set is hit as often as any policy that cannot see the future, and unlike LRU it does not fall
// to zero hits on a cyclic order. Files survive a daemon restart (a restarted daemon refills
// from disk, not the network); since every chunk read back is checked against the metadata by
// the caller, a stale, torn or foreign file is only ever a miss (and is removed).
//
// Writes go to a temporary name and are renamed into place, so a kill -9 leaves no file that
// looks complete and is not.
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <unordered_map>

#include "stoker/status.h"
#include "stoker/storage.h"

namespace stoker::node {

struct DiskTierStats {
  uint64_t hits = 0, writes = 0, bytes = 0, files = 0, limit = 0;
};

class DiskTier {
 public:
  // Uses (and creates) `dir`; keeps the files of chunks in `wanted` that are already there and
  // removes every other file in it.
  static Result<std::unique_ptr<DiskTier>> Open(const std::string& dir, uint64_t limit_bytes,
                                                const std::set<uint64_t>& wanted);

  // Fills dst from the chunk's file: NotFound if there is none (or it has another size).
  Status Read(uint64_t chunk_id, std::span<std::byte> dst);
  // Keeps a copy if there is room (errors are swallowed: the tier is only a cache).
  void Write(uint64_t chunk_id, std::span<const std::byte> bytes);
  // The file failed the caller's check: forget it.
  void Remove(uint64_t chunk_id);
  DiskTierStats stats() const;

 private:
  DiskTier(std::shared_ptr<Storage> files, uint64_t limit)
      : files_on_disk_(std::move(files)), limit_(limit) {}

  const std::shared_ptr<Storage> files_on_disk_;  // PosixStorage over the tier's directory
  const uint64_t limit_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, uint64_t> files_;  // chunk id -> size (reserved while writing)
  uint64_t bytes_ = 0;
  uint64_t hits_ = 0, writes_ = 0;
};

}  // namespace stoker::node
