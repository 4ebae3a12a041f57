// Reading a packed dataset: open by path or URI, look up files by path or index, read their
// bytes (CRC32C-checked), list directories.
//
//   auto ds = stoker::Dataset::Open("/data/imagenet.stoker");
//   auto idx = (*ds)->Find("train/n01440764/n01440764_10026.JPEG");
//   auto bytes = (*ds)->ReadFile(*idx);   // Corruption error naming the file on a bad CRC
//   auto columns = (*ds)->ReadColumns(0);  // a column dataset's typed values (columns.h)
//
// A Dataset is one immutable version: the newest when it was opened, or the one asked for.
// Thread-safety: every const method may be called concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/columns.h"
#include "stoker/status.h"
#include "stoker/storage.h"

namespace stoker {

// Stoker's own readers (loader, mount, node) reach the version's metadata through it
// (dataset::ViewOf in src/dataset/version_view.h); it is not part of the API.
struct DatasetAccess;

struct FileInfo {
  uint64_t index = 0;
  std::string path;
  uint64_t size = 0;
  uint32_t crc32c = 0;
  int32_t label = -1;  // -1: unlabelled
  uint64_t chunk_id = 0;
  uint32_t chunk = 0;   // the chunk's index in this version (storage order)
  uint64_t offset = 0;  // of the bytes inside the chunk file
};

struct DirEntry {
  std::string name;
  bool is_dir = false;
  uint64_t index = 0;  // file index (0 for directories)
  uint64_t size = 0;   // files only
};

struct DatasetOpenOptions {
  // Check the CRC32C of every metadata block read. Off only for fuzzing.
  bool verify_checksums = true;
  // Read every file's location when opening (32 bytes of memory per file), as readers of the
  // whole dataset (`stoker mount`) need. Off: locations are read per lookup, so looking at a
  // few files of a huge dataset reads about 1 % of its metadata; a loader rank reads those of
  // the chunks it reads, or all (LoadLocations) where it needs them (docs/sampler.md, "What a
  // rank reads"); stoker.Dataset in Python opens so.
  bool read_locations = true;
  // The version to open; the newest if unset.
  std::optional<uint64_t> version;
};

class Dataset {
 public:
  static Result<std::unique_ptr<Dataset>> Open(std::string_view uri,
                                               const DatasetOpenOptions& options = {});
  static Result<std::unique_ptr<Dataset>> Open(std::shared_ptr<Storage> storage,
                                               const DatasetOpenOptions& options = {});
  ~Dataset();

  uint64_t version() const;
  // Indices are 64-bit: the format numbers files and samples in u64 (docs/format.md §7).
  uint64_t file_count() const;
  // Samples are files, except for datasets packed from tar shards, where the files sharing a
  // basename (x.jpg, x.cls, x.json) are one sample.
  uint64_t sample_count() const;
  // [first, first+count); InvalidArgument if out of range. A dataset opened without
  // read_locations reads its samples section on the first call (an error if it cannot).
  Result<std::pair<uint64_t, uint64_t>> SampleFiles(uint64_t sample) const;
  Result<int32_t> SampleLabel(uint64_t sample) const;
  uint32_t class_count() const;
  std::string_view ClassName(uint32_t label) const;

  // NotFound if absent. Paths are relative to the dataset root.
  Result<uint64_t> Find(std::string_view path) const;
  // Index must be < file_count(); InvalidArgument otherwise.
  Result<FileInfo> Stat(uint64_t file) const;
  // The file's path (reads a metadata block unless cached; an error if it cannot be read).
  Result<std::string> Path(uint64_t file) const;
  // For error messages only: the path, or "file #N" if it cannot be read.
  std::string FilePath(uint64_t file) const;
  Result<std::vector<std::pair<std::string, std::string>>> FileAttributes(uint64_t file) const;

  // The file's bytes, checked against its CRC32C (Corruption naming the file on mismatch).
  Result<std::vector<std::byte>> ReadFile(uint64_t file) const;
  Status ReadFileInto(uint64_t file, std::span<std::byte> dst) const;  // dst.size() == size

  // A column dataset's sample (stoker.Writer; docs/columns.md), typed: every column of the
  // schema, in name order, its file read (CRC-checked) and its value decoded and checked, as
  // Python's ds[i] reads it. Corruption naming the file where a value is not one of its
  // column's type; InvalidArgument for a dataset without columns or a sample out of range.
  Result<std::vector<ColumnEntry>> ReadColumns(uint64_t sample) const;

  // Whether `path` is a directory ("" is the root).
  Result<bool> IsDir(std::string_view path) const;
  // Entries of a directory ("" for the root): subdirectories first, then files, each by name.
  Result<std::vector<DirEntry>> List(std::string_view dir) const;

  // The open chunk file with index `chunk` (opened once, then shared): for readers that fetch
  // large ranges themselves, like the read pipeline. Checks the file's size.
  Result<std::shared_ptr<RandomAccessFile>> ChunkFile(uint32_t chunk) const;

  // Reads every file's location into memory (32 bytes per file; once, thread-safe), as readers
  // of the whole dataset (loaders, mount) need; a dataset opened with read_locations has them.
  Status LoadLocations() const;

  Storage& storage() const;

 private:
  friend struct DatasetAccess;
  struct Impl;
  Status CheckIndex(uint64_t file) const;
  explicit Dataset(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker
