// Chunk files: many samples' bytes back to back between a header and an index + footer.
// Layout (docs/format.md §2), all integers little-endian:
//
//   header  32 B   "STKCHUNK" | u32 version=1 | u32 flags | u64 chunk_id | u64 reserved=0
//   data           payloads back to back (entry i starts where entry i-1 ends)
//   index   8 B/entry   u32 length | u32 crc32c of the payload
//           (flag bit 0, a *wide* index: 12 B/entry, u64 length | u32 crc32c — a chunk holding
//           a file of 4 GiB or more)
//   footer  32 B   "STKCEND1" | u32 entry_count | u32 index_crc32c | u64 data_length
//                  | u32 data_crc32c | u32 footer_crc32c (of the header + the footer's first 28 B)
//
// The metadata records each chunk's id, file size, data CRC and entry count, and each sample's
// offset, length and CRC, so readers need nothing but the metadata to fetch one sample with a
// single range read. The index and footer make a chunk self-describing for `verify` and repair.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stoker/storage.h"

namespace stoker::format {

inline constexpr char kChunkMagic[8] = {'S', 'T', 'K', 'C', 'H', 'U', 'N', 'K'};
inline constexpr char kChunkFooterMagic[8] = {'S', 'T', 'K', 'C', 'E', 'N', 'D', '1'};
inline constexpr uint32_t kChunkVersion = 1;
inline constexpr uint64_t kChunkHeaderSize = 32;
inline constexpr uint64_t kChunkFooterSize = 32;
inline constexpr uint64_t kChunkIndexEntrySize = 8;       // a narrow index's entries
inline constexpr uint64_t kWideChunkIndexEntrySize = 12;  // a wide index's
inline constexpr uint32_t kChunkWideIndex = 1u << 0;      // header flag
// The largest payload a narrow index can hold; larger ones need a wide chunk.
inline constexpr uint64_t kMaxNarrowPayload = 0xFFFFFFFFull;

inline uint64_t ChunkIndexEntrySize(bool wide) {
  return wide ? kWideChunkIndexEntrySize : kChunkIndexEntrySize;
}

// "chunks/00000000deadbeef.chunk"
std::string ChunkPath(uint64_t chunk_id);
// The id in a path that ChunkPath wrote exactly; nullopt for any other path.
std::optional<uint64_t> ParseChunkPath(std::string_view path);

// The one check of a file's bytes against the CRC32C the metadata gives them (as LevelDB's
// ReadBlock is the one place a block is checked), for every reader: the dataset, the loaders'
// read pipelines, the FUSE view and verify. `chunk` names the chunk as the reader's storage
// describes it. OK, or Corruption "<path>: CRC32C mismatch (stored x, read y) in <chunk>".
// `names()` returns the file's path and the chunk's description, and is called only on a
// mismatch: naming a file may read a block of the segment's path table (a round trip to a
// server), and a check runs for every sample.
// PayloadMismatch is the message without the path (verify reports path and message apart);
// CheckPayloadCrc takes a CRC computed piecewise (crc32c::Extend), CheckPayload the bytes.
struct PayloadNames {
  std::string path;
  std::string chunk;
};
std::string PayloadMismatch(uint32_t stored, uint32_t actual, std::string_view chunk);
Status PayloadCorruption(const PayloadNames& names, uint32_t stored, uint32_t actual);
uint32_t PayloadCrc(std::span<const std::byte> bytes);

template <typename Names>  // Names() -> PayloadNames
Status CheckPayloadCrc(uint32_t stored, uint32_t actual, Names&& names) {
  if (actual == stored) [[likely]]
    return Status::OK();
  return PayloadCorruption(names(), stored, actual);
}
template <typename Names>  // Names() -> PayloadNames
Status CheckPayload(uint32_t stored, std::span<const std::byte> bytes, Names&& names) {
  return CheckPayloadCrc(stored, PayloadCrc(bytes), std::forward<Names>(names));
}

// Where one payload landed.
struct ChunkEntryRef {
  uint64_t offset;  // from the start of the chunk file
  uint64_t length;
  uint32_t crc32c;
};

// What the metadata records about a finished chunk.
struct ChunkInfo {
  uint64_t id = 0;
  uint64_t file_size = 0;
  uint32_t data_crc32c = 0;
  uint32_t entry_count = 0;
  bool wide_index = false;  // 12-byte index entries (a file of 4 GiB or more)
  // The bytes besides the payloads: header, index and footer.
  uint64_t fixed_bytes() const {
    return kChunkHeaderSize + kChunkFooterSize + ChunkIndexEntrySize(wide_index) * entry_count;
  }
};

// Writes one chunk file. Not thread-safe. Finish() syncs the file; until then it is garbage
// that no version references.
class ChunkWriter {
 public:
  // `wide_index`: 12-byte index entries, for payloads over kMaxNarrowPayload.
  static Result<std::unique_ptr<ChunkWriter>> Create(Storage& storage, uint64_t chunk_id,
                                                     bool wide_index = false);

  Result<ChunkEntryRef> Add(std::span<const std::byte> payload);
  // One payload streamed in pieces (a file too large to hold in memory): Append... then End.
  Status AppendToEntry(std::span<const std::byte> piece);
  Result<ChunkEntryRef> EndEntry();
  // Bytes the file would have if finished now.
  uint64_t projected_size() const;
  uint32_t entry_count() const { return entry_count_; }
  uint64_t id() const { return id_; }
  Result<ChunkInfo> Finish();

 private:
  ChunkWriter(std::unique_ptr<WritableFile> file, uint64_t id, std::string header, bool wide);
  std::unique_ptr<WritableFile> file_;
  const uint64_t id_;
  const std::string header_;
  const bool wide_;
  std::string index_;
  uint32_t entry_count_ = 0;
  uint64_t data_length_ = 0;
  uint32_t data_crc_ = 0;
  uint64_t entry_length_ = 0;  // of the entry being written
  uint32_t entry_crc_ = 0;
};

// What `verify` learns from a chunk file read whole and checked against its own index.
struct ChunkCheck {
  Status status;                       // OK, or the first structural/checksum problem
  std::vector<ChunkEntryRef> entries;  // from the chunk's index (empty if it is unreadable)
};

// Checks header, footer, index and data CRCs of a whole chunk file held in `bytes`; `expected`
// is what the metadata says about it.
ChunkCheck CheckChunk(std::span<const std::byte> bytes, const ChunkInfo& expected,
                      const std::string& name);

// The same for a chunk file, read in one piece if it holds at most `piece_bytes`, else its
// tail and then pieces of `piece_bytes` (memory bounded by the piece and the index, whatever
// the file's size). The whole file passes through `on_data` in order (offset in the file,
// bytes), also when its frame is broken. An error for a failed read; corruption in the
// returned check's status.
using ChunkDataFn = std::function<void(uint64_t offset, std::span<const std::byte> bytes)>;

// The CRC32C of the bytes [begin, end) of a file that streams past in pieces, in order (as
// CheckChunk's on_data sees it): each piece adds what of it lies in the extent.
struct ExtentCrc {
  uint64_t begin = 0, end = 0;
  uint32_t crc = 0;
  uint64_t covered = 0;  // bytes of the extent seen so far
  void Add(uint64_t offset, std::span<const std::byte> bytes);
  bool complete() const { return covered == end - begin; }
};
Result<ChunkCheck> CheckChunk(RandomAccessFile& file, const ChunkInfo& expected,
                              const std::string& name, uint64_t piece_bytes,
                              const ChunkDataFn& on_data);

// A chunk file checked as it arrives, in order, so that what is verified can be handed on
// before the rest has come (the job cache streams chunks store -> owner -> reader -> trainer):
// the header and the tail (index + footer) first, checked as CheckChunk checks them (the footer's
// data CRC must be the metadata's), then the data entry by entry against the index's CRC32C.
class ChunkStreamCheck {
 public:
  // The tail's size as the metadata implies it: the index and the footer.
  static uint64_t TailBytes(const ChunkInfo& expected);
  // `header`: the file's first kChunkHeaderSize bytes; `tail`: its last TailBytes(expected).
  static Result<ChunkStreamCheck> Begin(std::span<const std::byte> header,
                                        std::span<const std::byte> tail, const ChunkInfo& expected,
                                        const std::string& name);
  // `file` holds the whole file's bytes as far as they have come: [0, present) in order.
  // Checks the entries now complete and returns how much of the file is verified from its start:
  // the header and whole verified entries, and the whole file once every entry passed and the
  // tail is there too. Corruption names the entry that failed; what was verified stays so, and
  // once the entry's bytes are replaced (from another source) the next call checks it again.
  Result<uint64_t> Advance(std::span<const std::byte> file, uint64_t present);

 private:
  ChunkStreamCheck() = default;
  std::string name_;
  std::vector<ChunkEntryRef> entries_;
  size_t next_ = 0;  // the first entry not yet verified
  uint64_t size_ = 0, tail_bytes_ = 0;
};

}  // namespace stoker::format
