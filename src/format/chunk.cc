#include "format/chunk.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "common/coding.h"
#include "common/crc32c.h"

namespace stoker::format {

std::string PayloadMismatch(uint32_t stored, uint32_t actual, std::string_view chunk) {
  return fmt::format("CRC32C mismatch (stored {:08x}, read {:08x}) in {}", stored, actual, chunk);
}

Status PayloadCorruption(const PayloadNames& names, uint32_t stored, uint32_t actual) {
  return Status::Corruption(
      fmt::format("{}: {}", names.path, PayloadMismatch(stored, actual, names.chunk)));
}

uint32_t PayloadCrc(std::span<const std::byte> bytes) { return crc32c::Value(bytes); }

namespace {

std::span<const std::byte> AsBytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

}  // namespace

std::string ChunkPath(uint64_t chunk_id) { return fmt::format("chunks/{:016x}.chunk", chunk_id); }

std::optional<uint64_t> ParseChunkPath(std::string_view path) {
  constexpr std::string_view kPrefix = "chunks/", kSuffix = ".chunk";
  if (path.size() != kPrefix.size() + 16 + kSuffix.size() || !path.starts_with(kPrefix) ||
      !path.ends_with(kSuffix)) {
    return std::nullopt;
  }
  uint64_t id = 0;
  for (char c : path.substr(kPrefix.size(), 16)) {
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else {
      return std::nullopt;  // upper case is not what ChunkPath writes
    }
    id = (id << 4) | static_cast<uint64_t>(digit);
  }
  return id;
}

ChunkWriter::ChunkWriter(std::unique_ptr<WritableFile> file, uint64_t id, std::string header,
                         bool wide)
    : file_(std::move(file)), id_(id), header_(std::move(header)), wide_(wide) {}

Result<std::unique_ptr<ChunkWriter>> ChunkWriter::Create(Storage& storage, uint64_t chunk_id,
                                                         bool wide_index) {
  STOKER_ASSIGN_OR_RETURN(auto file, storage.Create(ChunkPath(chunk_id)));
  std::string header(kChunkMagic, sizeof(kChunkMagic));
  coding::PutFixed<uint32_t>(&header, kChunkVersion);
  coding::PutFixed<uint32_t>(&header, wide_index ? kChunkWideIndex : 0);  // flags
  coding::PutFixed<uint64_t>(&header, chunk_id);
  coding::PutFixed<uint64_t>(&header, 0);  // reserved
  STOKER_RETURN_IF_ERROR(file->Append(AsBytes(header)));
  return std::unique_ptr<ChunkWriter>(
      new ChunkWriter(std::move(file), chunk_id, std::move(header), wide_index));
}

Result<ChunkEntryRef> ChunkWriter::Add(std::span<const std::byte> payload) {
  STOKER_RETURN_IF_ERROR(AppendToEntry(payload));
  return EndEntry();
}

Status ChunkWriter::AppendToEntry(std::span<const std::byte> piece) {
  if (!wide_ && entry_length_ + piece.size() > kMaxNarrowPayload) {
    return Status::InvalidArgument(
        fmt::format("a payload over {} bytes needs a chunk with a wide index", kMaxNarrowPayload));
  }
  STOKER_RETURN_IF_ERROR(file_->Append(piece));
  entry_length_ += piece.size();
  entry_crc_ = crc32c::Extend(entry_crc_, piece.data(), piece.size());
  data_crc_ = crc32c::Extend(data_crc_, piece.data(), piece.size());
  return Status::OK();
}

Result<ChunkEntryRef> ChunkWriter::EndEntry() {
  const ChunkEntryRef ref{kChunkHeaderSize + data_length_, entry_length_, entry_crc_};
  data_length_ += entry_length_;
  entry_length_ = 0;
  entry_crc_ = 0;
  if (wide_) {
    coding::PutFixed<uint64_t>(&index_, ref.length);
  } else {
    coding::PutFixed<uint32_t>(&index_, static_cast<uint32_t>(ref.length));
  }
  coding::PutFixed<uint32_t>(&index_, ref.crc32c);
  ++entry_count_;
  return ref;
}

uint64_t ChunkWriter::projected_size() const {
  return kChunkHeaderSize + data_length_ + entry_length_ + index_.size() + kChunkFooterSize;
}

Result<ChunkInfo> ChunkWriter::Finish() {
  std::string footer(kChunkFooterMagic, sizeof(kChunkFooterMagic));
  coding::PutFixed<uint32_t>(&footer, entry_count());
  coding::PutFixed<uint32_t>(&footer, crc32c::Value(index_));
  coding::PutFixed<uint64_t>(&footer, data_length_);
  coding::PutFixed<uint32_t>(&footer, data_crc_);
  const uint32_t footer_crc = crc32c::Extend(crc32c::Value(header_), footer.data(), footer.size());
  coding::PutFixed<uint32_t>(&footer, footer_crc);
  STOKER_RETURN_IF_ERROR(file_->Append(AsBytes(index_)));
  STOKER_RETURN_IF_ERROR(file_->Append(AsBytes(footer)));
  STOKER_RETURN_IF_ERROR(file_->Sync());
  STOKER_RETURN_IF_ERROR(file_->Close());
  return ChunkInfo{id_, projected_size(), data_crc_, entry_count(), wide_};
}

namespace {

// How much of a large chunk's end is read first: the footer, and the index of up to some
// 87,000 files (narrow entries), so that a check of a large chunk reads its tail once.
constexpr uint64_t kChunkTailBytes = 1 << 20;

// What the footer says about the data region, once header, footer and index check out.
struct ChunkFrame {
  uint64_t data_length = 0;
  uint32_t data_crc32c = 0;
};

// Checks everything of a chunk file but its data: `header` and `footer` are its first and last
// 32 bytes, `index` the index region the footer implies (IndexRegion), `size` the file's size.
// Fills check.entries; check.status says what is wrong.
ChunkFrame CheckFrame(std::span<const std::byte> header, std::span<const std::byte> footer_bytes,
                      std::span<const std::byte> index_bytes, uint64_t size,
                      const ChunkInfo& expected, const std::string& name, ChunkCheck& check) {
  auto fail = [&](std::string why) {
    check.status = Status::Corruption(fmt::format("chunk {}: {}", name, why));
    check.entries.clear();
    return ChunkFrame{};
  };
  const auto* p = reinterpret_cast<const char*>(header.data());
  const auto* footer = reinterpret_cast<const char*>(footer_bytes.data());
  if (std::memcmp(p, kChunkMagic, 8) != 0) return fail("bad header magic");
  if (std::memcmp(footer, kChunkFooterMagic, 8) != 0) return fail("bad footer magic");
  const uint32_t footer_crc = crc32c::Extend(crc32c::Value(p, kChunkHeaderSize), footer, 28);
  if (footer_crc != coding::DecodeFixed<uint32_t>(footer + 28)) return fail("footer CRC mismatch");
  if (coding::DecodeFixed<uint32_t>(p + 8) != kChunkVersion) return fail("unknown chunk version");
  const uint32_t flags = coding::DecodeFixed<uint32_t>(p + 12);
  if ((flags & ~kChunkWideIndex) != 0) return fail("unknown header flags");
  const bool wide = flags & kChunkWideIndex;
  if (wide != expected.wide_index) return fail("index width differs from the metadata");
  if (coding::DecodeFixed<uint64_t>(p + 16) != expected.id) return fail("chunk id mismatch");
  const uint32_t entry_count = coding::DecodeFixed<uint32_t>(footer + 8);
  const uint64_t data_length = coding::DecodeFixed<uint64_t>(footer + 16);
  const uint64_t entry_size = ChunkIndexEntrySize(wide);
  const uint64_t index_size = uint64_t{entry_count} * entry_size;
  if (entry_count != expected.entry_count) return fail("entry count differs from the metadata");
  // Compared by subtraction: a huge data_length would make the sum wrap around to `size`.
  const uint64_t body_size = size - kChunkHeaderSize - kChunkFooterSize;
  if (data_length > body_size || index_size != body_size - data_length ||
      index_bytes.size() != index_size) {
    return fail("footer lengths do not add up to the file size");
  }
  const auto* index = reinterpret_cast<const char*>(index_bytes.data());
  if (crc32c::Value(index, index_size) != coding::DecodeFixed<uint32_t>(footer + 12)) {
    return fail("index CRC mismatch");
  }
  uint64_t offset = kChunkHeaderSize;
  check.entries.reserve(entry_count);
  for (uint32_t i = 0; i < entry_count; ++i) {
    const char* entry = index + i * entry_size;
    const uint64_t length =
        wide ? coding::DecodeFixed<uint64_t>(entry) : coding::DecodeFixed<uint32_t>(entry);
    const uint32_t crc = coding::DecodeFixed<uint32_t>(entry + entry_size - 4);
    if (length > kChunkHeaderSize + data_length - offset) {
      return fail("index entries overrun the data");
    }
    check.entries.push_back({offset, length, crc});
    offset += length;
  }
  if (offset != kChunkHeaderSize + data_length) return fail("index does not cover the data");
  return {data_length, coding::DecodeFixed<uint32_t>(footer + 24)};
}

// The size checks both checks make before reading anything else; empty if they pass.
std::optional<std::string> SizeProblem(uint64_t size, const ChunkInfo& expected) {
  if (size != expected.file_size) {
    return fmt::format("file has {} bytes, the metadata says {}", size, expected.file_size);
  }
  if (size < kChunkHeaderSize + kChunkFooterSize) return "too short for header and footer";
  return std::nullopt;
}

// Where the index lies, from the footer's own fields (CheckFrame checks they add up).
std::pair<uint64_t, uint64_t> IndexRegion(std::span<const std::byte> footer, uint64_t size) {
  const uint64_t data_length =
      coding::DecodeFixed<uint64_t>(reinterpret_cast<const char*>(footer.data()) + 16);
  const uint64_t body = size - kChunkHeaderSize - kChunkFooterSize;
  if (data_length > body) return {kChunkHeaderSize, 0};  // CheckFrame rejects it
  return {kChunkHeaderSize + data_length, body - data_length};
}

void CheckDataCrc(uint32_t actual, const ChunkFrame& frame, const ChunkInfo& expected,
                  const std::string& name, ChunkCheck& check) {
  if (check.status.ok() && (actual != frame.data_crc32c || actual != expected.data_crc32c)) {
    check.status = Status::Corruption(fmt::format("chunk {}: data CRC mismatch", name));
  }
}

}  // namespace

void ExtentCrc::Add(uint64_t offset, std::span<const std::byte> bytes) {
  const uint64_t from = std::max(begin + covered, offset);
  const uint64_t to = std::min<uint64_t>(end, offset + bytes.size());
  if (from >= to) return;
  crc = crc32c::Extend(crc, bytes.data() + (from - offset), to - from);
  covered += to - from;
}

ChunkCheck CheckChunk(std::span<const std::byte> bytes, const ChunkInfo& expected,
                      const std::string& name) {
  ChunkCheck check;
  const uint64_t size = bytes.size();
  if (auto problem = SizeProblem(size, expected)) {
    check.status = Status::Corruption(fmt::format("chunk {}: {}", name, *problem));
    return check;
  }
  const auto footer = bytes.subspan(size - kChunkFooterSize);
  const auto [index_offset, index_size] = IndexRegion(footer, size);
  const ChunkFrame frame =
      CheckFrame(bytes.first(kChunkHeaderSize), footer, bytes.subspan(index_offset, index_size),
                 size, expected, name, check);
  if (!check.status.ok()) return check;
  CheckDataCrc(crc32c::Value(bytes.subspan(kChunkHeaderSize, frame.data_length)), frame, expected,
               name, check);
  return check;
}

Result<ChunkCheck> CheckChunk(RandomAccessFile& file, const ChunkInfo& expected,
                              const std::string& name, uint64_t piece_bytes,
                              const ChunkDataFn& on_data) {
  ChunkCheck check;
  const uint64_t size = file.Size();
  if (auto problem = SizeProblem(size, expected)) {
    check.status = Status::Corruption(fmt::format("chunk {}: {}", name, *problem));
    return check;
  }
  piece_bytes = std::max<uint64_t>(piece_bytes, 1);
  if (size <= piece_bytes) {  // one read, as for every chunk of the usual size
    std::vector<std::byte> bytes(size);
    STOKER_RETURN_IF_ERROR(file.ReadAt(0, bytes));
    check = CheckChunk(bytes, expected, name);
    if (on_data) on_data(0, bytes);
    return check;
  }
  // Larger: header and tail first (footer, and the index when it lies within the tail), then
  // the whole file in pieces, in order — passed to on_data even when the frame turns out
  // broken (a reader of one file needs only that file's bytes and CRC, so the caller can
  // still tell intact files apart) — and the frame is judged last.
  std::vector<std::byte> header(kChunkHeaderSize);
  STOKER_RETURN_IF_ERROR(file.ReadAt(0, header));
  const uint64_t tail_offset = size - std::min<uint64_t>(size, kChunkTailBytes);
  std::vector<std::byte> tail(size - tail_offset);
  STOKER_RETURN_IF_ERROR(file.ReadAt(tail_offset, tail));
  const auto footer = std::span<const std::byte>(tail).last(kChunkFooterSize);
  const auto [index_offset, index_size] = IndexRegion(footer, size);
  std::span<const std::byte> index;
  std::vector<std::byte> index_read;
  if (index_offset >= tail_offset) {
    index = std::span<const std::byte>(tail).subspan(index_offset - tail_offset, index_size);
  } else if (index_size ==
             uint64_t{expected.entry_count} * ChunkIndexEntrySize(expected.wide_index)) {
    // As large as the metadata's entry count says: bounded by what the metadata holds.
    index_read.resize(index_size);
    STOKER_RETURN_IF_ERROR(file.ReadAt(index_offset, index_read));
    index = index_read;
  }
  ExtentCrc data{kChunkHeaderSize, index_offset};  // the data region, as the footer says
  std::vector<std::byte> piece(piece_bytes);
  for (uint64_t done = 0; done < size;) {
    const auto bytes = std::span(piece).first(std::min<uint64_t>(piece.size(), size - done));
    STOKER_RETURN_IF_ERROR(file.ReadAt(done, bytes));
    data.Add(done, bytes);
    if (on_data) on_data(done, bytes);
    done += bytes.size();
  }
  const ChunkFrame frame = CheckFrame(header, footer, index, size, expected, name, check);
  if (check.status.ok()) CheckDataCrc(data.crc, frame, expected, name, check);
  return check;
}

uint64_t ChunkStreamCheck::TailBytes(const ChunkInfo& expected) {
  return uint64_t{expected.entry_count} * ChunkIndexEntrySize(expected.wide_index) +
         kChunkFooterSize;
}

Result<ChunkStreamCheck> ChunkStreamCheck::Begin(std::span<const std::byte> header,
                                                 std::span<const std::byte> tail,
                                                 const ChunkInfo& expected,
                                                 const std::string& name) {
  const uint64_t size = expected.file_size;
  if (auto problem = SizeProblem(size, expected)) {
    return Err(Status::Corruption(fmt::format("chunk {}: {}", name, *problem)));
  }
  if (header.size() != kChunkHeaderSize || tail.size() != TailBytes(expected) ||
      tail.size() > size - kChunkHeaderSize) {
    return Err(Status::Corruption(
        fmt::format("chunk {}: {} bytes, too short for its index and footer", name, size)));
  }
  const auto footer = tail.last(kChunkFooterSize);
  ChunkCheck check;
  const ChunkFrame frame = CheckFrame(header, footer, tail.first(tail.size() - kChunkFooterSize),
                                      size, expected, name, check);
  if (!check.status.ok()) return Err(check.status);
  if (frame.data_crc32c != expected.data_crc32c) {
    return Err(
        Status::Corruption(fmt::format("chunk {}: data CRC differs from the metadata", name)));
  }
  ChunkStreamCheck out;
  out.name_ = name;
  out.entries_ = std::move(check.entries);
  out.size_ = size;
  out.tail_bytes_ = tail.size();
  return out;
}

Result<uint64_t> ChunkStreamCheck::Advance(std::span<const std::byte> file, uint64_t present) {
  present = std::min<uint64_t>(present, file.size());
  for (; next_ < entries_.size(); ++next_) {
    const ChunkEntryRef& e = entries_[next_];
    if (e.offset + e.length > present) break;
    const auto payload = file.subspan(e.offset, e.length);
    if (crc32c::Value(payload) != e.crc32c) {
      return Err(Status::Corruption(
          fmt::format("chunk {}: entry {} (at {}) fails its CRC", name_, next_, e.offset)));
    }
  }
  // (The header, checked at Begin, counts only once the caller's buffer has it too.)
  if (next_ < entries_.size()) return std::min(entries_[next_].offset, present);
  // Every entry passed its CRC, and the index (which covers the data exactly) and the footer
  // passed theirs at Begin: the data CRC would add a second pass over the bytes and nothing
  // else. The tail counts once it is all there.
  return present >= size_ ? size_ : std::min(size_ - tail_bytes_, present);
}

}  // namespace stoker::format
