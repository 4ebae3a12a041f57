#include "fuse/open_file.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/crc32c.h"
#include "format/chunk.h"
#include "dataset/version_view.h"

namespace stoker::fuse {
namespace {

// Piece size for the streamed check of large files.
constexpr size_t kStreamPiece = 4 << 20;

}  // namespace

OpenFile::OpenFile(const Dataset& dataset, uint64_t file, uint64_t buffer_limit)
    : dataset_(dataset),
      file_(file),
      size_(dataset.view().file(file).length),
      whole_(size_ <= buffer_limit) {}

Result<std::span<const std::byte>> OpenFile::Read(uint64_t offset, size_t size,
                                                  std::vector<std::byte>& scratch,
                                                  bool* first_report) {
  *first_report = false;
  if (offset >= size_ || size == 0) return std::span<const std::byte>{};
  const size_t n = static_cast<size_t>(std::min<uint64_t>(size, size_ - offset));
  {
    std::lock_guard lock(mu_);
    if (!corruption_.ok()) return Err(corruption_);
    if (!loaded_) {
      if (Status s = Load(); !s.ok()) {
        if (s.IsCorruption()) corruption_ = s;
        *first_report = true;
        return Err(std::move(s));
      }
      loaded_ = true;
    }
  }
  // Loaded: bytes_ / chunk_ no longer change, so reads need no lock.
  if (whole_) return std::span<const std::byte>(bytes_.get() + offset, n);
  scratch.resize(n);
  if (Status s = chunk_->ReadAt(chunk_offset_ + offset, scratch); !s.ok()) {
    *first_report = true;
    return Err(s.WithContext(fmt::format("reading {}", dataset_.FilePath(file_))));
  }
  return std::span<const std::byte>(scratch);
}

Status OpenFile::Load() { return whole_ ? LoadWhole() : StreamCheck(); }

Status OpenFile::LoadWhole() {
  // for_overwrite: no zero fill, ReadFileInto writes every byte.
  auto bytes = std::make_unique_for_overwrite<std::byte[]>(size_);
  STOKER_RETURN_IF_ERROR(dataset_.ReadFileInto(file_, std::span(bytes.get(), size_)));
  bytes_ = std::move(bytes);
  return Status::OK();
}

Status OpenFile::StreamCheck() {
  const dataset::VersionView& snap = dataset_.view();
  const dataset::FileLocation r = snap.file(file_);
  auto chunk = dataset_.ChunkFile(r.chunk);
  if (!chunk) return chunk.error().WithContext(fmt::format("reading {}", dataset_.FilePath(file_)));
  std::vector<std::byte> piece(std::min<uint64_t>(kStreamPiece, size_));
  uint32_t crc = 0;
  for (uint64_t done = 0; done < size_;) {
    const auto n = static_cast<size_t>(std::min<uint64_t>(piece.size(), size_ - done));
    const std::span<std::byte> dst(piece.data(), n);
    if (Status s = (*chunk)->ReadAt(r.offset + done, dst); !s.ok()) {
      return s.WithContext(fmt::format("reading {}", dataset_.FilePath(file_)));
    }
    crc = crc32c::Extend(crc, dst.data(), dst.size());
    done += n;
  }
  if (crc != r.crc32c) {
    // The same message as Dataset::ReadFileInto gives for a small file.
    return Status::Corruption(fmt::format(
        "{}: CRC32C mismatch (stored {:08x}, read {:08x}) in {}", dataset_.FilePath(file_),
        r.crc32c, crc, dataset_.storage().Describe(snap.ChunkName(r.chunk))));
  }
  chunk_ = std::move(*chunk);
  chunk_offset_ = r.offset;
  return Status::OK();
}

}  // namespace stoker::fuse
