// One open file of a mounted dataset (`stoker mount`, docs/mount.md): no byte reaches the
// kernel before the whole file has been checked against its stored CRC32C.
//
// The check needs every byte of the file, so the first read of an open file reads all of it:
//   - files up to `buffer_limit` bytes (all of them in image datasets: ImageNet averages
//     ~110 KB) are read once with Dataset::ReadFileInto into a buffer owned by this open file,
//     and every read is served from that buffer;
//   - larger files are streamed through once to compute the CRC32C (memory stays bounded), then
//     reads go to the chunk file directly. The bytes served were checked once, on this open.
// Nothing is read at open(): with the kernel's page cache kept across opens (keep_cache), a file
// read before is served by the kernel and never reaches us again.
//
// A CRC mismatch is sticky: every later read of this open file fails the same way. I/O errors
// (a storage or network hiccup) are not: the next read tries again.
// Thread-safety: Read may be called concurrently (the kernel sends readahead in parallel).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "stoker/dataset.h"

namespace stoker::fuse {

class OpenFile {
 public:
  // `dataset` must outlive this object; `file` must be < dataset.file_count().
  OpenFile(const Dataset& dataset, uint64_t file, uint64_t buffer_limit);

  // Bytes [offset, offset + size) of the file, clipped at its end (empty at or past the end).
  // The span points into this object or into `scratch` and stays valid until the next Read
  // with the same scratch or this object's destruction. On failure, `*first_report` tells
  // whether this error is new (to be logged) or the replay of a known CRC mismatch.
  Result<std::span<const std::byte>> Read(uint64_t offset, size_t size,
                                          std::vector<std::byte>& scratch, bool* first_report);

  uint64_t size() const { return size_; }

 private:
  // Reads and checks the file once; called with mu_ held.
  Status Load();
  Status LoadWhole();
  Status StreamCheck();

  const Dataset& dataset_;
  const uint64_t file_;
  const uint64_t size_;
  const bool whole_;  // size_ <= buffer_limit: served from bytes_

  std::mutex mu_;
  bool loaded_ = false;           // guarded by mu_; once true, the fields below are immutable
  Status corruption_;             // guarded by mu_: a sticky CRC mismatch
  std::unique_ptr<std::byte[]> bytes_;     // whole_: the checked bytes
  std::shared_ptr<RandomAccessFile> chunk_;  // !whole_: the chunk holding the file
  uint64_t chunk_offset_ = 0;                // !whole_: where the file starts in it
};

}  // namespace stoker::fuse
