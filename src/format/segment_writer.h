// The pieces that write a segment's bytes (docs/format.md §3), shared by the builder of a
// writer's new segment (segment_builder.cc) and the merge of several segments into one
// (segment_merge.cc): the section framing with its footer and trailer, keyed block tables,
// location blocks, key-rank blocks and the directory table. Everything streams to a
// SegmentSink; only per-block indexes (a few bytes per 256 entries) are held.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/spool.h"
#include "format/chunk.h"
#include "format/segment.h"
#include "format/segment_builder.h"
#include "format/segment_layout.h"
#include "stoker/status.h"

namespace stoker::format {

// Writes sections back to back after the header, then the footer and trailer.
class SegmentFileWriter {
 public:
  explicit SegmentFileWriter(SegmentSink& sink) : sink_(sink) {}

  Status Header();
  // A whole section at once, from memory or from a spool.
  Status Section(uint32_t kind, std::string_view bytes);
  Status Section(uint32_t kind, const Spool& spool);
  // A section streamed in pieces: Begin, Append..., End.
  void Begin(uint32_t kind);
  Status Append(std::string_view bytes);
  // A group of chunk records ending in its own CRC32C: the section's CRC in the footer is
  // extended over the records alone. (Over whole CRC-ended groups it would be a constant, the
  // CRC's residue, and the footer, whose CRC a version record names, would not identify the
  // segment's chunks.)
  Status AppendGroup(std::string_view group);
  void End();

  // The footer's fields besides the section records (docs/format.md §3.1).
  struct Footer {
    uint32_t flags = 0;
    uint64_t first_file = 0, files = 0, first_sample = 0, samples = 0;
    uint32_t first_label = 0, classes = 0;
    uint64_t total_bytes = 0, chunks = 0, dirs = 0, attrs = 0;
    std::string first_key, last_key;
  };
  Status Finish(const Footer& footer);

 private:
  struct Record {
    uint32_t kind = 0, crc32c = 0;
    uint64_t offset = 0, size = 0;
  };
  SegmentSink& sink_;
  uint64_t offset_ = 0;
  std::vector<Record> sections_;
  bool open_ = false;
};

// Entries of keyed blocks (§3.3) in the making: each key prefix-compressed against the previous
// one (the first of a block in full), each value length-prefixed; Take() ends the block with
// its CRC32C.
class KeyedBlockEncoder {
 public:
  void Add(std::string_view key, std::string_view value);
  uint64_t count() const { return count_; }
  const std::string& first_key() const { return first_key_; }
  // The block's bytes with their CRC32C; the encoder starts a new block.
  std::string Take();

 private:
  std::string block_, first_key_, previous_;
  uint64_t count_ = 0;
};

// A block table of sorted keys (§3.3, §3.6): data blocks of kBlockEntries entries go to `emit`;
// the index blocks (one entry per data block: its first key and size) and the top index (one
// record per index block) go to spools in `temp_dir` until WriteIndex() copies them into their
// sections. Memory is a few blocks, whatever the entry count.
class KeyedTableWriter {
 public:
  using Emit = std::function<Status(std::string_view)>;
  explicit KeyedTableWriter(Emit emit, std::string temp_dir = DefaultSpoolDir())
      : emit_(std::move(emit)), temp_dir_(std::move(temp_dir)) {}

  Status Add(std::string_view key, std::string_view value);
  Status Finish();
  // After Finish: the index-blocks and top-index sections.
  Status WriteIndex(SegmentFileWriter& out, uint32_t index_kind, uint32_t top_kind);

  uint64_t count() const { return count_; }

  // A table streamed straight into section `blocks_kind` of `out` (which it begins); no other
  // section may be written until FinishInto() ends it and writes the index sections.
  static KeyedTableWriter Into(SegmentFileWriter& out, uint32_t blocks_kind);
  Status FinishInto(SegmentFileWriter& out, uint32_t index_kind, uint32_t top_kind);

 private:
  Status CreateSpools();
  Status EndBlock();
  Status EndIndexBlock();
  Emit emit_;
  std::string temp_dir_;
  std::optional<Spool> index_, top_;  // created with the first block
  KeyedBlockEncoder block_, index_block_;
  uint64_t count_ = 0, blocks_size_ = 0, index_size_ = 0;
};

// The chunk table (§3.1, kind 1): records in groups of kBlockEntries, each group followed by its
// CRC32C, streamed into section kSegChunks of `out`.
class ChunkTableWriter {
 public:
  explicit ChunkTableWriter(SegmentFileWriter& out) : out_(out) {}
  // `samples`: those whose first file lies in the chunk (its entry count unless grouped).
  Status Add(const ChunkInfo& chunk, uint64_t first_location, uint32_t samples);
  Status Finish();

 private:
  Status EndGroup();
  SegmentFileWriter& out_;
  uint64_t count_ = 0;
  std::string group_;
};

// Location blocks (§3.2), streamed into section kSegLocations of `out` (between Begin and
// End, which this class calls); Finish() writes the location index.
class LocationsWriter {
 public:
  // `grouped`: entries also say their sample (§3.2).
  LocationsWriter(SegmentFileWriter& out, uint64_t files, bool grouped,
                  std::string temp_dir = DefaultSpoolDir())
      : out_(out), files_(files), grouped_(grouped), temp_dir_(std::move(temp_dir)) {}
  // Ordinal by ordinal. Of `l`'s offset (its place in its chunk) and chunk (that chunk's index
  // in the segment) only a block's first are stored: the others follow.
  Status Add(const SegmentLocation& l);
  Status Finish();

 private:
  SegmentFileWriter& out_;
  const uint64_t files_;
  const bool grouped_;
  const std::string temp_dir_;
  uint64_t count_ = 0, size_ = 0;
  // Appends the current size (a block's offset, or the end) to the location index.
  Status IndexEntry();
  std::optional<Spool> index_;  // the location index, in groups, until Finish
  std::string group_;           // the group being filled
  uint64_t group_entries_ = 0;
  std::string block_;
};

// Key ranks (§3.5): the rank in key order of the file at each position, in position order,
// in fixed-width blocks with a CRC32C each, streamed into section kSegKeyRanks.
class KeyRanksWriter {
 public:
  KeyRanksWriter(SegmentFileWriter& out, uint64_t files) : out_(out), files_(files) {}
  Status Add(uint64_t rank);
  Status Finish();

 private:
  SegmentFileWriter& out_;
  const uint64_t files_;
  uint64_t count_ = 0;
  std::string block_;
};

// Bytes per key rank: 4 while ranks fit in 32 bits, else 8.
inline uint64_t KeyRankWidth(uint64_t files) { return files <= (1ull << 32) ? 4 : 8; }

// The files directly inside a directory, as a run of key ranks.
struct DirFiles {
  uint64_t first = 0, count = 0;
};
using DirTable = std::map<std::string, DirFiles, std::less<>>;

// Records a file's directory (and, the first time, its ancestors up to the root) in `dirs`.
// Files must come in key order, so that each directory's files are one run of ranks.
void AddToDirTable(DirTable& dirs, std::string_view path, uint64_t rank);
// Sections kSegDirs, kSegDirIndex and kSegDirKeys; `dirs` holds the root at least.
Status WriteDirTable(SegmentFileWriter& out, const DirTable& dirs);

// A chunk record's entry-count word: the count, and the wide-index bit.
inline uint32_t ChunkRecordCount(const ChunkInfo& chunk) {
  return chunk.entry_count | (chunk.wide_index ? kChunkRecordWideIndex : 0);
}

// The big-endian 8-byte prefix of an attribute key: byte order is position order.
void PutBigEndian64(std::string* out, uint64_t v);
uint64_t GetBigEndian64(std::string_view in);

}  // namespace stoker::format
