// The byte layout of a metadata segment (docs/format.md §3), shared by the builder, the reader
// and the fuzz target. A segment holds the files one writer added to a dataset: immutable,
// block-structured so that a lookup reads a few kilobytes of it, and self-checking (a CRC32C on
// every block and every other section).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace stoker::format {

inline constexpr char kSegmentMagic[8] = {'S', 'T', 'K', 'S', 'E', 'G', 'M', 'T'};
inline constexpr char kSegmentTrailerMagic[8] = {'S', 'T', 'K', 'S', 'E', 'N', 'D', '2'};
// Format 2 read its index sections whole at open (~0.3 bytes per file); format 3, which writers
// write, reads them a block at a time (docs/format.md §3.6). Readers read both.
inline constexpr uint32_t kFormatVersion2 = 2;
inline constexpr uint32_t kFormatVersion3 = 3;
inline constexpr uint64_t kSegmentHeaderSize = 16;   // magic, u32 format version, u32 zero
inline constexpr uint64_t kSegmentTrailerSize = 32;  // see docs/format.md §3.1
inline constexpr uint64_t kSegmentFooterFixedSize = 88;
inline constexpr uint64_t kSegmentSectionRecordSize = 32;
// Entries per block in every block table, index block and group: small enough that a lookup
// decodes ~4 KiB, large enough that a top index holds one record per 65,536 entries.
inline constexpr uint64_t kBlockEntries = 256;
// The longest key of a keyed table (§3.3, §7): paths (at most 4,096 bytes, as Linux's PATH_MAX)
// and attribute keys (8 bytes + the name). Readers refuse longer ones before building them, so a
// block of B entries decodes to at most B × 64 KiB however its prefixes are shared.
inline constexpr uint64_t kMaxKeyBytes = 65536;
// Format 2's index record: u64 block offset, u32 key offset, u32 key length.
inline constexpr uint64_t kIndexRecordSize = 16;
// Format 3's top index of a keyed table: per index block, u64 its offset, u64 the offset of its
// first data block, u32 key length (then the key); a final record of two u64 ends it.
inline constexpr uint64_t kTopRecordFixedSize = 20;
inline constexpr uint64_t kSegmentChunkRecordSize2 = 32;  // format 2
// Format 3 adds u32 samples (those whose first file lies in the chunk) and u32 zero.
inline constexpr uint64_t kSegmentChunkRecordSize = 40;
// Format 3: chunk records and location-index entries in groups of kBlockEntries, each group
// followed by its CRC32C, at a fixed stride (a reader computes where group g lies).
inline constexpr uint64_t kChunkGroupStride = kBlockEntries * kSegmentChunkRecordSize + 4;
// A location-index group holds the offsets of kBlockEntries location blocks and the offset
// where the next block starts (the first of the next group, or the section's end).
inline constexpr uint64_t kLocationGroupStride = (kBlockEntries + 1) * 8 + 4;
// In a chunk record's entry-count word: the chunk has a wide index (docs/format.md §2).
inline constexpr uint32_t kChunkRecordWideIndex = 1u << 31;
inline constexpr uint64_t kMaxSegmentFooterSize = 1 << 20;

// Footer flags. The first three are the dataset's (the same in every segment, and in the
// version record); kSegmentPositioned is the segment's own.
inline constexpr uint32_t kSegmentGrouped = 1u << 0;         // samples section present
inline constexpr uint32_t kSegmentLabelled = 1u << 1;        // files carry labels
inline constexpr uint32_t kSegmentLabelsFromDirs = 1u << 2;  // class = first path component
inline constexpr uint32_t kSegmentDatasetFlags = 0x7;
// Positions are not key order (a merged segment, §3.5): file values carry the position and a
// key-ranks section maps positions to key ranks.
inline constexpr uint32_t kSegmentPositioned = 1u << 3;
inline constexpr uint32_t kSegmentKnownFlags = 0xF;

enum SegmentSection : uint32_t {
  kSegChunks = 1,         // chunk records (format 3: in CRC-checked groups)
  kSegLocations = 2,      // location blocks, chunk by chunk in storage order
  kSegLocationIndex = 3,  // offsets of the location blocks (format 3: in CRC-checked groups)
  kSegFiles = 4,          // file blocks in key order (= position order unless positioned)
  kSegFileIndex = 5,      // format 2: index records of the file blocks; 3: index blocks
  kSegFileKeys = 6,       // format 2: first keys of the file blocks; 3: the top index
  kSegDirs = 7,
  kSegDirIndex = 8,
  kSegDirKeys = 9,
  kSegClasses = 10,  // names of the classes this segment adds (varint length + bytes)
  kSegSamples = 11,  // grouped only: u64 first file position of each sample, then F
  kSegAttrs = 12,
  kSegAttrIndex = 13,
  kSegAttrKeys = 14,
  kSegKeyRanks = 15,      // positioned only: the key rank of each position, in fixed-width blocks
  kSegSectionKinds = 16,  // kinds 1..15 are defined; others are rejected (formats 2 and 3)
};

// A file's key orders files by (directory, name) bytewise: "dir/sub\0name", "\0name" in the
// root. No path contains NUL, and NUL sorts before every other byte, so a directory's files come
// before its subdirectories' and sort as (directory, name) pairs.
inline std::string FileKeyOf(std::string_view path) {
  const size_t slash = path.rfind('/');
  std::string key;
  key.reserve(path.size() + 1);
  if (slash == std::string_view::npos) {
    key.push_back('\0');
    key.append(path);
  } else {
    key.append(path.substr(0, slash)).push_back('\0');
    key.append(path.substr(slash + 1));
  }
  return key;
}

// The path of a file key; nullopt for a damaged key: no '\0' separator, or a name that is not
// one component (empty, or holding '/' or a second '\0'). Such a name would break the round
// trip FileKeyOf(path) == key, so a lookup by the path would find another file's entry.
inline std::optional<std::string> PathOfFileKey(std::string_view key) {
  const size_t nul = key.find('\0');
  if (nul == std::string_view::npos) return std::nullopt;
  const std::string_view name = key.substr(nul + 1);
  if (name.empty() || name.find_first_of(std::string_view("/\0", 2)) != std::string_view::npos) {
    return std::nullopt;
  }
  if (nul == 0) return std::string(key.substr(1));
  std::string path(key);
  path[nul] = '/';
  return path;
}

}  // namespace stoker::format
