// One published version of a format-2 dataset (docs/format.md §1, §4), seen through its
// segments: the global numbering of files, samples, classes and chunks, path lookups and
// listings that read a block or two of each segment that could hold the answer, and, for bulk
// readers (the loader, verify), every file's location in one 32-byte record each.
//
// Opening reads the version record and each segment's footer and top indexes (format 3: a few
// KiB at any file count; chunk records are read a group at a time when first needed), so a
// `stoker stat` of one file stays cheap on a billion-file dataset;
// LoadLocations() then reads the location blocks of every segment once, and
// KeepChunkLocations() those of some chunks.
// Thread-safety: const methods may run concurrently (LoadSamples and LoadLocations included).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "format/columns.h"
#include "format/segment.h"
#include "format/version_record.h"
#include "stoker/dataset.h"
#include "stoker/storage.h"

namespace stoker::dataset {

// Where one file's bytes lie: what a reader holds per file (32 bytes).
struct FileLocation {
  uint64_t offset = 0;  // of the payload in the chunk file
  uint64_t length = 0;  // files of 4 GiB and more lie alone in a wide chunk
  uint32_t crc32c = 0;
  uint32_t chunk = 0;  // index into the version's chunks
  int32_t label = -1;  // -1: none
};
static_assert(sizeof(FileLocation) == 32);

// What a version says about one chunk file.
struct ChunkRef : format::ChunkInfo {
  // The samples whose first file lies in it; nullopt in a tar-grouped segment of format 2.
  std::optional<uint32_t> sample_count;
};

// A sample by its files: [first_file, first_file + count).
struct SampleRef {
  uint64_t sample = 0, first_file = 0, count = 0;
};

// The locations of some chunks' files (a trainer rank's share of an epoch), by chunk and by
// file index, and the samples that start in those chunks. Immutable once built.
struct KeptLocations {
  std::vector<uint32_t> chunks;       // ascending
  std::vector<uint64_t> chunk_begin;  // into `files`, per chunk, then where strays begin
  // Chunk by chunk, in storage order; then the strays: files of kept samples that lie in other
  // chunks (a tar sample whose chunk filled between its files).
  std::vector<std::pair<uint64_t, FileLocation>> files;
  std::vector<uint32_t> by_file;  // indices into `files`, by ascending file index
  // Of a grouped version: the samples whose first file lies in a kept chunk, chunk by chunk.
  std::vector<SampleRef> samples;
  std::vector<uint64_t> sample_begin;  // into `samples`, per chunk, then samples.size()
  std::vector<uint32_t> by_sample;     // indices into `samples`, by ascending sample

  // The files of chunk `c`, or nullopt if it is not kept.
  std::optional<std::span<const std::pair<uint64_t, FileLocation>>> ChunkFiles(uint32_t c) const;
  // The samples that start in chunk `c` (grouped versions), or nullopt if it is not kept.
  std::optional<std::span<const SampleRef>> ChunkSamples(uint32_t c) const;
  const FileLocation* Find(uint64_t file) const;       // nullptr if not kept
  const SampleRef* FindSample(uint64_t sample) const;  // grouped versions; nullptr if not kept
};

class VersionView {
 public:
  // `storage` must outlive the view. Checks every segment against the record (size, footer
  // CRC, counts) and that the segments number files, samples, classes and chunks gaplessly.
  static Result<std::unique_ptr<VersionView>> Open(Storage& storage, format::VersionRecord record,
                                                   bool verify_checksums = true);

  const format::VersionRecord& record() const { return record_; }
  uint64_t version() const { return record_.version; }
  uint64_t file_count() const { return record_.files; }
  uint64_t sample_count() const { return record_.samples; }
  uint32_t class_count() const { return static_cast<uint32_t>(classes_.size()); }
  uint32_t chunk_count() const { return chunk_count_; }
  uint64_t total_bytes() const { return record_.bytes; }
  bool grouped() const;
  bool labelled() const;
  bool labels_from_dirs() const;
  // A column dataset's schema (stoker.Writer; format/columns.h); empty for other datasets.
  const format::Schema& columns() const { return columns_; }

  // Chunk c (< chunk_count()): read from its segment's chunk table (a group of 256 records at a
  // time, when first asked for), so that opening a version reads no per-chunk metadata.
  Result<ChunkRef> chunk(uint32_t c) const;
  // Chunk c's file name in the dataset (format::ChunkPath), for messages: "chunk #c" if its
  // record cannot be read.
  std::string ChunkName(uint32_t c) const;
  std::string_view class_name(uint32_t k) const { return classes_[k]; }  // k < class_count()
  const std::vector<std::string>& class_names() const { return classes_; }
  // The files of sample s (< sample_count()): [first, first + count). Needs the samples
  // (LoadSamples, or LoadLocations, which loads them too).
  std::pair<uint64_t, uint64_t> SampleFiles(uint64_t s) const;
  // Reads every segment's samples section (8 bytes per sample of a tar-packed dataset; once,
  // thread-safe): not at open, so that a lookup by path never pays for it.
  Status LoadSamples() const;

  size_t segment_count() const { return parts_.size(); }
  const format::Segment& segment(size_t j) const { return *parts_[j].segment; }

  // Lookups by path ("" is the root directory).
  Result<std::optional<uint64_t>> FindFile(std::string_view path) const;
  Result<bool> IsDir(std::string_view path) const;
  // Subdirectories first, then files, each by name; NotFound if `dir` is no directory.
  Result<std::vector<DirEntry>> List(std::string_view dir) const;
  // The paths of those of `keys` (format::FileKeyOf, sorted) that the version holds (a
  // writer's conflict check).
  Result<std::vector<std::string>> Holding(std::span<const std::string> keys) const;

  // By file index (< file_count()).
  Result<std::string> FilePath(uint64_t file) const;
  Result<FileLocation> Location(uint64_t file) const;  // from the table once loaded
  Result<std::vector<std::pair<std::string, std::string>>> Attributes(uint64_t file) const;

  // The files of chunk `c` (< chunk_count()) with their locations, in storage order: reads only
  // the location blocks that hold them (memory and I/O in proportion to the chunk).
  Result<std::vector<std::pair<uint64_t, FileLocation>>> ChunkFiles(uint32_t c) const;
  // The same read, with the samples that start in chunk c (grouped versions whose segments say
  // them: format 3; Unsupported for a grouped format-2 segment).
  Status ReadChunk(uint32_t c, std::vector<std::pair<uint64_t, FileLocation>>* files,
                   std::vector<SampleRef>* samples) const;
  // Reads every file's location (and sample) into memory (once, thread-safe; later calls
  // return at once). 32 bytes per file: for readers of the whole dataset only.
  Status LoadLocations() const;
  bool has_locations() const {
    return locations_loaded_.load(std::memory_order_acquire) || record_.files == 0;
  }
  // Only after LoadLocations() succeeded.
  const FileLocation& file(uint64_t f) const { return locations_[f]; }

  // Keeps the locations of the files of `chunks` (ascending), reading only their location
  // blocks and reusing what is kept already, in place of the chunks kept before: a trainer
  // rank's share of an epoch, found there by its read pipeline. In a grouped version, also the
  // samples that start in them, with the locations of their files in other chunks. Thread-safe; a
  // reader holding the previous set (kept_locations()) keeps it.
  Status KeepChunkLocations(std::span<const uint32_t> chunks) const;
  std::shared_ptr<const KeptLocations> kept_locations() const;
  int32_t sample_label(uint64_t s) const { return locations_[SampleFiles(s).first].label; }

 private:
  struct Part {
    std::unique_ptr<format::Segment> segment;
    uint64_t first_file = 0, first_sample = 0;
    uint32_t first_chunk = 0;
  };
  VersionView() = default;
  // The segment holding file index `file` / sample `s`.
  const Part& PartOfFile(uint64_t file) const;
  const Part& PartOfSample(uint64_t s) const;
  const Part& PartOfChunk(uint32_t c) const;
  FileLocation Global(const Part& part, const format::SegmentLocation& l) const;

  format::VersionRecord record_;
  format::Schema columns_;
  std::vector<Part> parts_;
  uint32_t chunk_count_ = 0;
  std::vector<std::string> classes_;
  // Written once by LoadLocations (under locations_mu_), then read without a lock by whoever
  // saw locations_loaded_ set.
  mutable std::mutex locations_mu_;
  mutable std::vector<FileLocation> locations_;
  mutable std::atomic<bool> locations_loaded_ = false;
  mutable std::mutex kept_mu_;
  mutable std::shared_ptr<const KeptLocations> kept_;  // guarded by kept_mu_
};

// The metadata of an open Dataset's version, for stoker's own readers of the whole dataset
// (file locations, chunks); the public API (include/stoker/dataset.h) does not expose it.
const VersionView& ViewOf(const Dataset& dataset);

}  // namespace stoker::dataset
