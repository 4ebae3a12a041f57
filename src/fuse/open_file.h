// One open file of a mounted dataset (`stoker mount`, docs/mount.md): no byte reaches the
// kernel before the whole file has been checked against its stored CRC32C.
//
// The check needs every byte of the file, so the first read of an open file reads all of it:
//   - files up to `buffer_limit` bytes (all of them in image datasets: ImageNet averages
//     ~110 KB) are read once with Dataset::ReadFileInto into a buffer owned by this open file,
//     and every read is served from that buffer;
//   - larger files are streamed through once to compute the CRC32C (memory stays bounded),
//     recording on the way a CRC32C of every 256 KiB piece (16 B per MiB). Later reads go to
//     the chunk file again, a whole piece at a time, and each piece must match its recorded CRC
//     before any of its bytes is served: bytes that changed in the chunk since the check (a
//     rewrite, a bad disk, a storage server answering differently) are refused, never served.
//     The pieces of the latest read are kept, so sequential reads read each piece once.
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

  // Size of the pieces a large file is checked in after its first read.
  static constexpr uint64_t kCheckPiece = 256 << 10;

 private:
  // Consecutive checked pieces of a large file: [first, first + count) and their bytes.
  struct Pieces {
    uint64_t first = 0;
    uint64_t count = 0;
    std::vector<std::byte> bytes;
  };

  // Reads and checks the file once; called with mu_ held.
  Status Load();
  Status LoadWhole();
  Status StreamCheck();
  // Large files: bytes [offset, offset + n) into `scratch`, from pieces read and checked again.
  Status ReadChecked(uint64_t offset, size_t n, std::vector<std::byte>& scratch);
  Status PieceMismatch(uint64_t piece, uint32_t read_crc) const;

  const Dataset& dataset_;
  const uint64_t file_;
  const uint64_t size_;
  const bool whole_;  // size_ <= buffer_limit: served from bytes_

  std::mutex mu_;
  bool loaded_ = false;                 // guarded by mu_; once true, the fields below are immutable
  Status corruption_;                   // guarded by mu_: a sticky CRC mismatch
  std::unique_ptr<std::byte[]> bytes_;  // whole_: the checked bytes
  std::shared_ptr<RandomAccessFile> chunk_;  // !whole_: the chunk holding the file
  uint64_t chunk_offset_ = 0;                // !whole_: where the file starts in it
  std::vector<uint32_t> piece_crcs_;         // !whole_: CRC32C of each kCheckPiece piece

  std::mutex pieces_mu_;
  std::shared_ptr<const Pieces> latest_;  // guarded by pieces_mu_: the latest read's pieces
};

}  // namespace stoker::fuse
