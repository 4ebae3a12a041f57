#include "fuse/open_file.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/crc32c.h"
#include "dataset/version_view.h"
#include "format/chunk.h"

namespace stoker::fuse {
namespace {

// Piece size for the streamed check of large files.
constexpr size_t kStreamPiece = 4 << 20;

}  // namespace

OpenFile::OpenFile(const Dataset& dataset, uint64_t file, uint64_t buffer_limit)
    : dataset_(dataset),
      file_(file),
      size_(dataset::ViewOf(dataset).file(file).length),
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
  // Loaded: bytes_ / chunk_ / piece_crcs_ no longer change, so reads need no lock.
  if (whole_) return std::span<const std::byte>(bytes_.get() + offset, n);
  if (Status s = ReadChecked(offset, n, scratch); !s.ok()) {
    // A piece that changed since the check is as corrupt as a file that fails it: sticky.
    std::lock_guard lock(mu_);
    *first_report = corruption_.ok();
    if (s.IsCorruption() && corruption_.ok()) corruption_ = s;
    return Err(std::move(s));
  }
  return std::span<const std::byte>(scratch);
}

Status OpenFile::ReadChecked(uint64_t offset, size_t n, std::vector<std::byte>& scratch) {
  const uint64_t first = offset / kCheckPiece;
  const uint64_t last = (offset + n - 1) / kCheckPiece;
  std::shared_ptr<const Pieces> pieces;
  {
    std::lock_guard lock(pieces_mu_);
    pieces = latest_;
  }
  if (pieces == nullptr || first < pieces->first || last >= pieces->first + pieces->count) {
    auto fresh = std::make_shared<Pieces>();
    fresh->first = first;
    fresh->count = last - first + 1;
    const uint64_t begin = first * kCheckPiece;
    const uint64_t end = std::min(size_, (last + 1) * kCheckPiece);
    fresh->bytes.resize(static_cast<size_t>(end - begin));
    if (Status s = chunk_->ReadAt(chunk_offset_ + begin, fresh->bytes); !s.ok()) {
      return s.WithContext(fmt::format("reading {}", dataset_.FilePath(file_)));
    }
    for (uint64_t p = first; p <= last; ++p) {
      const uint64_t at = (p - first) * kCheckPiece;
      const size_t len = static_cast<size_t>(std::min<uint64_t>(kCheckPiece, end - begin - at));
      const uint32_t crc = crc32c::Value(fresh->bytes.data() + at, len);
      if (crc != piece_crcs_[p]) return PieceMismatch(p, crc);
    }
    pieces = std::move(fresh);
    std::lock_guard lock(pieces_mu_);
    latest_ = pieces;
  }
  const auto* from = pieces->bytes.data() + (offset - pieces->first * kCheckPiece);
  scratch.assign(from, from + n);
  return Status::OK();
}

Status OpenFile::PieceMismatch(uint64_t piece, uint32_t read_crc) const {
  const dataset::VersionView& snap = dataset::ViewOf(dataset_);
  const dataset::FileLocation r = snap.file(file_);
  return Status::Corruption(fmt::format(
      "{}: bytes {}..{} changed since they were checked (CRC32C {:08x}, read {:08x}) in {}",
      dataset_.FilePath(file_), piece * kCheckPiece, std::min(size_, (piece + 1) * kCheckPiece) - 1,
      piece_crcs_[piece], read_crc, dataset_.storage().Describe(snap.ChunkName(r.chunk))));
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
  const dataset::VersionView& snap = dataset::ViewOf(dataset_);
  const dataset::FileLocation r = snap.file(file_);
  auto chunk = dataset_.ChunkFile(r.chunk);
  if (!chunk) return chunk.error().WithContext(fmt::format("reading {}", dataset_.FilePath(file_)));
  static_assert(kStreamPiece % kCheckPiece == 0, "a streamed piece holds whole check pieces");
  std::vector<std::byte> piece(std::min<uint64_t>(kStreamPiece, size_));
  std::vector<uint32_t> piece_crcs;
  piece_crcs.reserve((size_ + kCheckPiece - 1) / kCheckPiece);
  uint32_t crc = 0;
  for (uint64_t done = 0; done < size_;) {
    const auto n = static_cast<size_t>(std::min<uint64_t>(piece.size(), size_ - done));
    const std::span<std::byte> dst(piece.data(), n);
    if (Status s = (*chunk)->ReadAt(r.offset + done, dst); !s.ok()) {
      return s.WithContext(fmt::format("reading {}", dataset_.FilePath(file_)));
    }
    crc = crc32c::Extend(crc, dst.data(), dst.size());
    for (size_t at = 0; at < n; at += kCheckPiece) {
      piece_crcs.push_back(crc32c::Value(dst.subspan(at, std::min<size_t>(kCheckPiece, n - at))));
    }
    done += n;
  }
  STOKER_RETURN_IF_ERROR(format::CheckPayloadCrc(r.crc32c, crc, [&] {
    return format::PayloadNames{dataset_.FilePath(file_),
                                dataset_.storage().Describe(snap.ChunkName(r.chunk))};
  }));
  chunk_ = std::move(*chunk);
  chunk_offset_ = r.offset;
  piece_crcs_ = std::move(piece_crcs);
  return Status::OK();
}

}  // namespace stoker::fuse
