#include "format/chunk.h"

#include <cstring>

#include <fmt/format.h>

#include "common/coding.h"
#include "common/crc32c.h"

namespace stoker::format {
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

ChunkWriter::ChunkWriter(std::unique_ptr<WritableFile> file, uint64_t id, std::string header)
    : file_(std::move(file)), id_(id), header_(std::move(header)) {}

Result<std::unique_ptr<ChunkWriter>> ChunkWriter::Create(Storage& storage, uint64_t chunk_id) {
  STOKER_ASSIGN_OR_RETURN(auto file, storage.Create(ChunkPath(chunk_id)));
  std::string header(kChunkMagic, sizeof(kChunkMagic));
  coding::PutFixed<uint32_t>(&header, kChunkVersion);
  coding::PutFixed<uint32_t>(&header, 0);  // flags
  coding::PutFixed<uint64_t>(&header, chunk_id);
  coding::PutFixed<uint64_t>(&header, 0);  // reserved
  STOKER_RETURN_IF_ERROR(file->Append(AsBytes(header)));
  return std::unique_ptr<ChunkWriter>(new ChunkWriter(std::move(file), chunk_id, std::move(header)));
}

Result<ChunkEntryRef> ChunkWriter::Add(std::span<const std::byte> payload) {
  if (payload.size() > kMaxPayloadSize) {
    return Err(Status::InvalidArgument(fmt::format("payload of {} bytes exceeds the {} byte limit",
                                                   payload.size(), kMaxPayloadSize)));
  }
  STOKER_RETURN_IF_ERROR(file_->Append(payload));
  const ChunkEntryRef ref{kChunkHeaderSize + data_length_, static_cast<uint32_t>(payload.size()),
                          crc32c::Value(payload)};
  data_length_ += payload.size();
  data_crc_ = crc32c::Extend(data_crc_, payload.data(), payload.size());
  coding::PutFixed<uint32_t>(&index_, ref.length);
  coding::PutFixed<uint32_t>(&index_, ref.crc32c);
  return ref;
}

uint64_t ChunkWriter::projected_size() const {
  return kChunkHeaderSize + data_length_ + index_.size() + kChunkFooterSize;
}

Result<ChunkInfo> ChunkWriter::Finish() {
  std::string footer(kChunkFooterMagic, sizeof(kChunkFooterMagic));
  coding::PutFixed<uint32_t>(&footer, entry_count());
  coding::PutFixed<uint32_t>(&footer, crc32c::Value(index_));
  coding::PutFixed<uint64_t>(&footer, data_length_);
  coding::PutFixed<uint32_t>(&footer, data_crc_);
  const uint32_t footer_crc =
      crc32c::Extend(crc32c::Value(header_), footer.data(), footer.size());
  coding::PutFixed<uint32_t>(&footer, footer_crc);
  STOKER_RETURN_IF_ERROR(file_->Append(AsBytes(index_)));
  STOKER_RETURN_IF_ERROR(file_->Append(AsBytes(footer)));
  STOKER_RETURN_IF_ERROR(file_->Sync());
  STOKER_RETURN_IF_ERROR(file_->Close());
  return ChunkInfo{id_, projected_size(), data_crc_, entry_count()};
}

ChunkCheck CheckChunk(std::span<const std::byte> bytes, const ChunkInfo& expected,
                      const std::string& name) {
  ChunkCheck check;
  auto fail = [&](std::string why) {
    check.status = Status::Corruption(fmt::format("chunk {}: {}", name, why));
    return check;
  };
  const auto* p = reinterpret_cast<const char*>(bytes.data());
  const uint64_t size = bytes.size();
  if (size != expected.file_size) {
    return fail(fmt::format("file has {} bytes, the metadata says {}", size, expected.file_size));
  }
  if (size < kChunkHeaderSize + kChunkFooterSize) return fail("too short for header and footer");
  if (std::memcmp(p, kChunkMagic, 8) != 0) return fail("bad header magic");
  const char* footer = p + size - kChunkFooterSize;
  if (std::memcmp(footer, kChunkFooterMagic, 8) != 0) return fail("bad footer magic");
  const uint32_t footer_crc = crc32c::Extend(crc32c::Value(p, kChunkHeaderSize), footer, 28);
  if (footer_crc != coding::DecodeFixed<uint32_t>(footer + 28)) return fail("footer CRC mismatch");
  if (coding::DecodeFixed<uint32_t>(p + 8) != kChunkVersion) return fail("unknown chunk version");
  if (coding::DecodeFixed<uint64_t>(p + 16) != expected.id) return fail("chunk id mismatch");
  const uint32_t entry_count = coding::DecodeFixed<uint32_t>(footer + 8);
  const uint64_t data_length = coding::DecodeFixed<uint64_t>(footer + 16);
  const uint64_t index_size = uint64_t{entry_count} * kChunkIndexEntrySize;
  if (entry_count != expected.entry_count) return fail("entry count differs from the metadata");
  // Compared by subtraction: a huge data_length would make the sum wrap around to `size`.
  const uint64_t body_size = size - kChunkHeaderSize - kChunkFooterSize;
  if (data_length > body_size || index_size != body_size - data_length) {
    return fail("footer lengths do not add up to the file size");
  }
  const char* index = p + kChunkHeaderSize + data_length;
  if (crc32c::Value(index, index_size) != coding::DecodeFixed<uint32_t>(footer + 12)) {
    return fail("index CRC mismatch");
  }
  const uint32_t data_crc = crc32c::Value(p + kChunkHeaderSize, data_length);
  if (data_crc != coding::DecodeFixed<uint32_t>(footer + 24) || data_crc != expected.data_crc32c) {
    check.status = Status::Corruption(fmt::format("chunk {}: data CRC mismatch", name));
  }
  uint64_t offset = kChunkHeaderSize;
  check.entries.reserve(entry_count);
  for (uint32_t i = 0; i < entry_count; ++i) {
    const uint32_t length = coding::DecodeFixed<uint32_t>(index + i * kChunkIndexEntrySize);
    const uint32_t crc = coding::DecodeFixed<uint32_t>(index + i * kChunkIndexEntrySize + 4);
    if (offset + length > kChunkHeaderSize + data_length) {
      check.entries.clear();
      return fail("index entries overrun the data");
    }
    check.entries.push_back({offset, length, crc});
    offset += length;
  }
  if (offset != kChunkHeaderSize + data_length) return fail("index does not cover the data");
  return check;
}

}  // namespace stoker::format
