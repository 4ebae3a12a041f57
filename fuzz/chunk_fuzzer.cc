// CheckChunk on arbitrary bytes, with the snapshot's expectations taken from the input's own
// header and footer fields, so the checks past "does it match the snapshot" are reached. The
// property: no crash or out-of-bounds read, and whatever index entries it returns lie inside the
// data region, back to back, so `verify` can slice the file by them.
//
// Each input is checked twice: as is, and with its CRCs recomputed, so that mutations of the
// fields those CRCs cover (the lengths in the footer above all) reach the code behind them.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "common/crc32c.h"
#include "format/chunk.h"
#include "fuzz_check.h"

namespace {

using namespace stoker::format;

template <typename T>
T Field(std::span<const std::byte> bytes, size_t offset) {
  T value{};
  if (offset <= bytes.size() && sizeof(T) <= bytes.size() - offset) {
    std::memcpy(&value, bytes.data() + offset, sizeof(T));
  }
  return value;
}

template <typename T>
void SetField(std::vector<std::byte>& bytes, size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

void Check(std::span<const std::byte> bytes) {
  const size_t size = bytes.size();
  const size_t footer = size >= kChunkFooterSize ? size - kChunkFooterSize : 0;
  ChunkInfo expected;
  expected.file_size = size;
  expected.id = Field<uint64_t>(bytes, 16);
  expected.entry_count = Field<uint32_t>(bytes, footer + 8);
  expected.data_crc32c = Field<uint32_t>(bytes, footer + 24);
  const ChunkCheck check = CheckChunk(bytes, expected, "fuzz");
  const uint64_t data_end =
      size >= kChunkHeaderSize + kChunkFooterSize ? size - kChunkFooterSize : 0;
  uint64_t offset = kChunkHeaderSize;
  for (const auto& e : check.entries) {
    FUZZ_CHECK(e.offset == offset);
    FUZZ_CHECK(e.offset + e.length <= data_end);
    offset += e.length;
  }
  if (check.status.ok()) FUZZ_CHECK(check.entries.size() == expected.entry_count);

  // The same bytes against a snapshot that disagrees must fail.
  ChunkInfo other = expected;
  ++other.entry_count;
  FUZZ_CHECK(!CheckChunk(bytes, other, "fuzz").status.ok());
  other = expected;
  ++other.file_size;
  FUZZ_CHECK(!CheckChunk(bytes, other, "fuzz").status.ok());
}

// The input with its footer CRC, and where the footer's lengths allow, its index and data CRCs,
// made to match.
std::vector<std::byte> WithValidCrcs(std::span<const std::byte> in) {
  std::vector<std::byte> out(in.begin(), in.end());
  const size_t size = out.size();
  if (size < kChunkHeaderSize + kChunkFooterSize) return out;
  const size_t footer = size - kChunkFooterSize;
  const uint64_t index_size = uint64_t{Field<uint32_t>(in, footer + 8)} * kChunkIndexEntrySize;
  const uint64_t data_length = Field<uint64_t>(in, footer + 16);
  const uint64_t body = size - kChunkHeaderSize - kChunkFooterSize;
  if (data_length <= body && index_size <= body - data_length) {
    const std::byte* data = out.data() + kChunkHeaderSize;
    SetField(out, footer + 12, stoker::crc32c::Value(data + data_length, index_size));
    SetField(out, footer + 24, stoker::crc32c::Value(data, data_length));
  }
  const uint32_t footer_crc = stoker::crc32c::Extend(
      stoker::crc32c::Value(out.data(), kChunkHeaderSize), out.data() + footer, 28);
  SetField(out, footer + 28, footer_crc);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  Check(bytes);
  const std::vector<std::byte> fixed = WithValidCrcs(bytes);
  if (fixed.size() >= kChunkHeaderSize + kChunkFooterSize) Check(fixed);
  return 0;
}
