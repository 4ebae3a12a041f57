// The byte layout of a metadata snapshot (docs/format.md §A.3). Shared by the builder, the reader
// and the fuzz target; nothing else should need it. All integers little-endian; every section
// starts on an 8-byte boundary; records are read with memcpy, so the mapped file needs no parse
// step and no alignment beyond that.
#pragma once

#include <cstdint>

namespace stoker::format {

inline constexpr char kSnapshotMagic[8] = {'S', 'T', 'K', 'S', 'N', 'A', 'P', '1'};
inline constexpr char kSnapshotTrailerMagic[4] = {'S', 'E', 'N', 'D'};
inline constexpr uint32_t kSnapshotVersion = 1;
inline constexpr uint64_t kSnapshotHeaderSize = 256;
// u64 file size | u32 CRC32C of every byte before it... see docs/format.md §A.3.6
inline constexpr uint64_t kSnapshotTrailerSize = 16;
inline constexpr uint32_t kNoParent = 0xFFFFFFFFu;
inline constexpr int32_t kNoLabel = -1;

// Header flags.
inline constexpr uint32_t kFlagGroupedSamples = 1u << 0;         // samples table present
inline constexpr uint32_t kFlagLabelled = 1u << 1;               // labels and classes table present
inline constexpr uint32_t kFlagLabelsFromDirectories = 1u << 2;  // classes = first-level dirs

enum Section : uint32_t {
  kSectionChunks = 0,
  kSectionDirs,
  kSectionFiles,
  kSectionSamples,
  kSectionClasses,
  kSectionAttrs,
  kSectionFileHash,
  kSectionDirHash,
  kSectionStrings,
  kSectionCount,
};

// Header field offsets.
namespace header {
inline constexpr uint32_t kMagic = 0;            // 8 bytes
inline constexpr uint32_t kVersion = 8;          // u32
inline constexpr uint32_t kFlags = 12;           // u32
inline constexpr uint32_t kDatasetVersion = 16;  // u64
inline constexpr uint32_t kCreatedUnix = 24;     // u64 seconds
inline constexpr uint32_t kTotalBytes = 32;      // u64 sum of file lengths
inline constexpr uint32_t kFileCount = 40;       // u32
inline constexpr uint32_t kDirCount = 44;        // u32
inline constexpr uint32_t kSampleCount = 48;     // u32
inline constexpr uint32_t kChunkCount = 52;      // u32
inline constexpr uint32_t kClassCount = 56;      // u32
inline constexpr uint32_t kAttrCount = 60;       // u32
inline constexpr uint32_t kFileHashSlots = 64;   // u32, a power of two > file_count
inline constexpr uint32_t kDirHashSlots = 68;    // u32, a power of two > dir_count
inline constexpr uint32_t kSections = 72;        // kSectionCount × (u64 offset, u64 size)
}  // namespace header

// Strings live in the strings section as u16 length + bytes; a "strref" is the u32 offset of
// the length field from the start of that section.
struct ChunkRecord {  // 24 bytes
  uint64_t id;
  uint64_t file_size;
  uint32_t data_crc32c;
  uint32_t entry_count;
};
struct DirRecord {       // 32 bytes; dirs in breadth-first order, root first, siblings by name
  uint32_t parent;       // kNoParent for the root
  uint32_t name;         // strref: last path component ("" for the root)
  uint32_t path;         // strref: full relative path ("" for the root)
  uint32_t first_child;  // index of the first child dir; children are contiguous
  uint32_t child_count;
  uint32_t first_file;  // index of the first file directly inside; files are contiguous
  uint32_t file_count;
  uint32_t reserved;
};
struct FileRecord {  // 32 bytes; files ordered by (dir index, name)
  uint64_t offset;   // of the payload in the chunk file
  uint32_t length;
  uint32_t crc32c;  // of the payload
  uint32_t chunk;   // index into the chunks table
  uint32_t dir;     // index of the parent dir
  uint32_t name;    // strref: the basename
  int32_t label;    // class index, or kNoLabel
};
struct AttrRecord {  // 12 bytes; sorted by file
  uint32_t file;
  uint32_t key;    // strref
  uint32_t value;  // strref
};
static_assert(sizeof(ChunkRecord) == 24 && sizeof(DirRecord) == 32 && sizeof(FileRecord) == 32 &&
              sizeof(AttrRecord) == 12);

// A hash slot is a u64: low 32 bits = index + 1 (0 = empty), high 32 bits = the high 32 bits of
// Hash64(full path). Linear probing from Hash64(path) & (slots - 1).
inline constexpr uint64_t kHashSlotSize = 8;

}  // namespace stoker::format
