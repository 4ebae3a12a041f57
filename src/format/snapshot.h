// A dataset version's metadata, read in place from a memory-mapped snapshot file.
//
// Open() validates the whole structure once (every index and string reference in bounds, every
// hash table terminating, and by default the CRC32C of the file), so accessors can then trust
// the bytes: lookups are O(1), listings O(entries), nothing is copied or parsed.
// Thread-safety: immutable after Open(); every method may be called concurrently.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "format/snapshot_layout.h"
#include "stoker/storage.h"

namespace stoker::format {

struct SnapshotOpenOptions {
  // Check the CRC32C of the whole file (one pass at memory bandwidth). Off only in the fuzzer,
  // which must reach the structural checks behind it.
  bool verify_checksum = true;
};

class Snapshot {
 public:
  // `bytes` stays alive as long as the Snapshot. `name` appears in error messages.
  static Result<std::unique_ptr<Snapshot>> Open(std::shared_ptr<const FileBytes> bytes,
                                                std::string name,
                                                const SnapshotOpenOptions& options = {});

  uint64_t dataset_version() const { return dataset_version_; }
  uint64_t created_unix_seconds() const { return created_; }
  uint64_t total_bytes() const { return total_bytes_; }
  uint64_t size_bytes() const { return bytes_->bytes().size(); }
  uint32_t crc32c() const { return crc32c_; }
  bool labelled() const { return flags_ & kFlagLabelled; }
  bool grouped() const { return flags_ & kFlagGroupedSamples; }
  bool labels_from_directories() const { return flags_ & kFlagLabelsFromDirectories; }

  uint32_t file_count() const { return counts_.files; }
  uint32_t dir_count() const { return counts_.dirs; }
  uint32_t sample_count() const { return counts_.samples; }
  uint32_t chunk_count() const { return counts_.chunks; }
  uint32_t class_count() const { return counts_.classes; }

  FileRecord file(uint32_t i) const { return Load<FileRecord>(kSectionFiles, i); }
  DirRecord dir(uint32_t i) const { return Load<DirRecord>(kSectionDirs, i); }
  ChunkRecord chunk(uint32_t i) const { return Load<ChunkRecord>(kSectionChunks, i); }
  std::string_view file_name(uint32_t i) const { return String(file(i).name); }
  std::string_view dir_path(uint32_t i) const { return String(dir(i).path); }
  std::string_view dir_name(uint32_t i) const { return String(dir(i).name); }
  std::string_view class_name(uint32_t label) const;
  // "train/n01440764/n01440764_10026.JPEG"
  std::string FilePath(uint32_t i) const;

  // The files making up sample `s`: [first, first + count). One file per sample unless the
  // dataset was packed from tar shards, where files sharing a basename form one sample.
  std::pair<uint32_t, uint32_t> SampleFiles(uint32_t s) const;
  int32_t sample_label(uint32_t s) const { return file(SampleFiles(s).first).label; }

  // User attributes of a file, as (key, value) pairs.
  std::vector<std::pair<std::string_view, std::string_view>> FileAttributes(uint32_t i) const;

  // O(1) lookups by relative path ("a/b.jpg"; a leading or trailing '/' is ignored).
  std::optional<uint32_t> FindFile(std::string_view path) const;
  std::optional<uint32_t> FindDir(std::string_view path) const;
  // FindFile for many paths at once (out[i] for paths[i]); several times the throughput of
  // single lookups on large snapshots, because the cache misses of a group overlap.
  void FindFiles(std::span<const std::string_view> paths,
                 std::span<std::optional<uint32_t>> out) const;

 private:
  struct Counts {
    uint32_t files = 0, dirs = 0, samples = 0, chunks = 0, classes = 0, attrs = 0;
    uint32_t file_slots = 0, dir_slots = 0;
  };
  Snapshot() = default;
  Status Validate(const std::string& name);
  // Validate's steps; each returns the reason for Corruption, or "" when its part is sound.
  std::string CheckSections() const;
  std::string CheckDirectories() const;
  std::string CheckFiles() const;
  std::string CheckSamplesClassesAndAttributes() const;
  std::string CheckHashTables() const;
  std::string_view String(uint32_t strref) const;
  bool ValidString(uint32_t strref) const;
  template <typename T>
  T Load(Section section, uint64_t i) const;
  std::optional<uint32_t> Probe(Section table, uint32_t slots, std::string_view path, uint64_t hash,
                                bool is_dir) const;

  std::shared_ptr<const FileBytes> bytes_;
  const std::byte* base_ = nullptr;
  uint64_t section_offset_[kSectionCount] = {};
  uint64_t section_size_[kSectionCount] = {};
  uint32_t flags_ = 0;
  uint64_t dataset_version_ = 0, created_ = 0, total_bytes_ = 0;
  uint32_t crc32c_ = 0;
  Counts counts_;
};

template <typename T>
T Snapshot::Load(Section section, uint64_t i) const {
  T value;
  std::memcpy(&value, base_ + section_offset_[section] + i * sizeof(T), sizeof(T));
  return value;
}

}  // namespace stoker::format
