// One metadata segment (docs/format.md §3), read in place through range reads: Open() reads the
// trailer, the footer and the top indexes (format 3: about 60 bytes per 65,536 files; format 2
// read its whole index sections, about 0.3 bytes per file); every lookup then reads and checks
// a few ~4 KiB blocks. Nothing is trusted before its
// CRC32C and structure are checked, so a damaged or hostile segment yields a Corruption error
// naming it, never a crash or wrong data.
// Thread-safety: immutable after Open(); every method may be called concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "format/chunk.h"
#include "format/parsed_cache.h"
#include "stoker/status.h"
#include "stoker/storage.h"

namespace stoker::format {

struct SegmentInfo {
  uint32_t flags = 0;
  uint64_t first_file = 0, file_count = 0;
  uint64_t first_sample = 0, sample_count = 0;
  uint32_t first_label = 0, class_count = 0;  // the classes this segment adds
  uint64_t total_bytes = 0;
  uint64_t chunk_count = 0, dir_count = 0, attr_count = 0;
  std::string first_key, last_key;  // smallest and largest file key (FileKeyOf)
};

struct SegmentChunk : ChunkInfo {
  uint64_t first_location = 0;  // ordinal of its first entry among the segment's locations
  // The samples whose first file lies in this chunk (= entry_count unless grouped); nullopt in
  // a grouped format-2 segment, which does not say.
  std::optional<uint32_t> sample_count;
};

// Where one file's bytes lie, and its label.
struct SegmentLocation {
  uint64_t position = 0;  // of the file in the segment (its index - first_file)
  uint64_t chunk = 0;     // into the segment's chunks
  uint64_t offset = 0, length = 0;
  uint32_t crc32c = 0;
  int32_t label = -1;
  // The file's sample (in the segment) and, on the sample's first file, its file count (0 on
  // the others). A grouped format-2 segment does not say: sample_files is then 0 throughout.
  uint64_t sample = 0, sample_files = 0;
};

// A file with its path and location (directory listings).
struct SegmentFileEntry {
  std::string path;
  SegmentLocation location;
};

// A file entry as the file table holds it, in key order.
struct SegmentKeyedFile {
  std::string key;  // FileKeyOf(path)
  uint64_t position = 0, location = 0;
};

struct SegmentDir {
  // The files directly inside, as a run of key ranks (Files()); key ranks are positions
  // unless the segment is positioned.
  uint64_t first_rank = 0, file_count = 0;
};

struct SegmentOpenOptions {
  // Check every CRC32C. Off only in the fuzzer, which must reach the structural checks.
  bool verify_checksums = true;
};

class Segment {
 public:
  // `name` appears in error messages. Reads and validates trailer, footer and index sections.
  static Result<std::unique_ptr<Segment>> Open(std::shared_ptr<RandomAccessFile> file,
                                               std::string name,
                                               const SegmentOpenOptions& options = {});
  ~Segment();

  const SegmentInfo& info() const { return info_; }
  const std::string& name() const { return name_; }
  uint64_t size_bytes() const { return size_; }
  uint32_t footer_crc32c() const { return footer_crc_; }
  bool grouped() const;
  // Positions are not key order (a merged segment: docs/format.md §3.5).
  bool positioned() const;

  // Chunk c (< chunk_count). Format 3 reads chunk records a group of 256 at a time, when first
  // asked for.
  Result<SegmentChunk> chunk(uint64_t c) const;
  uint32_t format_version() const { return version_; }
  std::string_view class_name(uint32_t k) const { return classes_[k]; }  // k < class_count

  // The file at `position` (< file_count): its path and location.
  Result<std::string> FilePath(uint64_t position) const;
  Result<SegmentLocation> FileLocation(uint64_t position) const;
  // Position of `path`, nullopt if this segment does not hold it.
  Result<std::optional<uint64_t>> FindFile(std::string_view path) const;
  Result<std::optional<SegmentDir>> FindDir(std::string_view path) const;
  // The files of key ranks [first, first + count), reading each block once: a directory's
  // files (SegmentDir) with their names and locations (whose `position` is the file's).
  Result<std::vector<SegmentFileEntry>> Files(uint64_t first, uint64_t count) const;
  // The paths of those of `keys` (FileKeyOf, sorted) that this segment holds, reading each
  // block at most once (a writer's conflict check of its many new paths).
  Result<std::vector<std::string>> Holding(std::span<const std::string> keys) const;
  // Names of the directories directly inside `dir` that this segment knows, by name.
  Result<std::vector<std::string>> ChildDirs(std::string_view dir) const;
  // Reads the samples section (8 bytes per sample; grouped segments only, once): not at open,
  // so that a lookup by path never pays for it.
  Status LoadSamples() const;
  // The files of sample `s` (< sample_count), as positions [first, first + count). A grouped
  // segment's samples must have been loaded (LoadSamples).
  std::pair<uint64_t, uint64_t> SampleFiles(uint64_t s) const;
  // Whether locations and chunk records say their samples: all but grouped format-2 segments.
  bool says_samples() const;
  // The sample of the file at `position` (< file_count) and, if it is the sample's first file,
  // the sample's file count (else 0): what a location says, from the samples section (loaded).
  std::pair<uint64_t, uint64_t> SampleOf(uint64_t position) const;
  Result<std::vector<std::pair<std::string, std::string>>> Attributes(uint64_t position) const;

  // Every attribute, by file position then name.
  Status ForEachAttribute(const std::function<void(uint64_t position, std::string_view key,
                                                   std::string_view value)>& fn) const;
  // Reads and checks every block of every table (`stoker verify`).
  Status CheckEveryBlock() const;
  // The locations of chunk `c` (< chunk_count), in storage order: only the location blocks
  // that hold them are read (a reader of a few chunks, or verify chunk by chunk).
  Result<std::vector<SegmentLocation>> ChunkLocations(uint64_t c) const;
  // Every location, chunk by chunk in storage order (ordinal = rank in that order).
  Status ForEachLocation(
      const std::function<void(uint64_t ordinal, const SegmentLocation&)>& fn) const;
  // Every file in key order, with its position and the ordinal of its location.
  // `fn`'s error ends the walk and is returned.
  Status ForEachFile(const std::function<Status(uint64_t position, std::string_view path,
                                                uint64_t location)>& fn) const;
  // The files of block `b` (< file_block_count()) of the file table, in key order: a merge
  // reads every segment's files in key order one block at a time.
  uint64_t file_block_count() const;
  Result<std::vector<SegmentKeyedFile>> FileBlock(uint64_t b) const;
  // Every position with its key rank, in position order (the identity unless positioned).
  Status ForEachKeyRank(const std::function<Status(uint64_t position, uint64_t rank)>& fn) const;

  struct Table;  // a keyed block table (files, dirs, attributes)

 private:
  Segment() = default;
  Status Load();
  // Reads the header, trailer and footer and checks them up to the footer's format version
  // (which it sets); returns the footer's bytes.
  Result<std::string> ReadFooter();
  // The footer's fields, section records and keys, into info_ and sections_.
  Status ParseFooter(std::string_view footer, uint64_t footer_offset);
  // Each section the format and flags call for is present, and no other; and the sections are
  // large enough for the footer's file count.
  Status CheckSectionKinds() const;
  // The files, directories and attributes tables, checked against the footer.
  Status LoadTables();
  Status LoadClasses();
  // Format 2: the chunk table and location index, read whole at open.
  Status LoadFlatIndexes();
  // Format 3: the chunk table's and location index's sizes agree with the footer.
  Status CheckGroupedSizes() const;
  // Every location block, checked against the chunk records and the samples section.
  Status CheckSamplesOfLocations() const;
  // Where location block b lies in the locations section: (offset, size).
  Result<std::pair<uint64_t, uint64_t>> LocationBlockExtent(uint64_t b) const;
  Result<std::string> ReadSection(uint32_t kind) const;
  // A block's bytes, checked. `keep`: also into the block cache — lookups do; scans of a whole
  // table (merges, loading every location, verify) pass false, or they would fill the cache
  // (64 MiB per segment) with blocks read once.
  Result<std::string> ReadBlockBytes(uint32_t kind, uint64_t offset, uint64_t size,
                                     bool keep = true) const;
  Result<std::vector<SegmentLocation>> LocationBlock(uint64_t block, bool keep = true) const;
  Result<std::vector<uint64_t>> KeyRankBlock(uint64_t block, bool keep) const;
  Status Corrupt(std::string_view what) const;
  // A file entry's value: the ordinal of its location and the file's position.
  struct FileValue {
    uint64_t location = 0, position = 0;
  };
  Result<FileValue> ParseFileValue(std::string_view value, uint64_t rank) const;
  // The key rank of the file at `position`.
  Result<uint64_t> KeyRank(uint64_t position) const;
  // The file at `position`: its key and value.
  Result<std::pair<std::string, FileValue>> FileAt(uint64_t position) const;
  // A file entry's key as a path (Corruption if malformed).
  Result<std::string> PathOf(std::string_view key, uint64_t position) const;

  std::shared_ptr<RandomAccessFile> file_;
  std::string name_;
  SegmentOpenOptions options_;
  uint64_t size_ = 0;
  uint32_t footer_crc_ = 0;
  SegmentInfo info_;
  struct SectionRef {
    uint64_t offset = 0, size = 0;
    uint32_t crc = 0;
    bool present = false;
  };
  SectionRef sections_[16];
  uint32_t version_ = 0;
  std::vector<SegmentChunk> chunks_;                                   // format 2 only
  std::vector<uint64_t> location_index_;                               // format 2 only
  mutable ParsedCache<std::vector<SegmentChunk>> chunk_groups_{1024};  // format 3
  mutable std::mutex samples_mu_;
  mutable std::atomic<bool> samples_loaded_ = false;
  mutable std::vector<uint64_t> samples_;  // written once under samples_mu_
  std::vector<std::string> classes_;
  std::unique_ptr<Table> files_, dirs_, attrs_;
  // Checked blocks, by file offset: a loader asks for a sample's path per sample, and over the
  // network or S3 each block must cost one read, not one per lookup.
  static constexpr uint64_t kBlockCacheBytes = 64ull << 20;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<uint64_t, std::string> block_cache_;
  mutable uint64_t cache_bytes_ = 0;
};

}  // namespace stoker::format
