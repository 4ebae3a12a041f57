// Helpers shared by the unit tests: temporary directories, seeded random source trees (written
// to disk or fed straight to the packer), packing shortcuts, and tar writers for well-formed
// WebDataset shards as well as hostile archives.
// Not thread-safe: each test builds its own objects.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dataset/packer.h"
#include "dataset/source.h"
#include "format/snapshot_builder.h"
#include "stoker/storage.h"

namespace stoker::test {

// A fresh directory under /tmp, removed with everything in it when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // path() + "/" + relative
  std::string Join(std::string_view relative) const;

 private:
  std::string path_;
};

// A source tree held in memory: relative path → contents. Directories are implied by the files
// (a tree has no empty directories, just like a packed dataset).
struct Tree {
  std::map<std::string, std::string> files;

  // Every directory that holds a file somewhere below it, "" (the root) included, sorted.
  std::vector<std::string> Dirs() const;
  // What Dataset::List(dir) must return, as (name, is_dir): subdirectories first, then files,
  // each sorted by name (bytewise).
  std::vector<std::pair<std::string, bool>> Listing(std::string_view dir) const;
  // The label Dataset must report for a directory pack: the index of the file's first path
  // component among the sorted top-level directories (ImageFolder), or -1 for every file if any
  // file sits directly in the root (such a tree packs every file only with LabelPolicy::kNone:
  // with kAuto the files beside the class directories are left out).
  int32_t ExpectedLabel(std::string_view path) const;
  // Sorted top-level directory names (the ImageFolder classes).
  std::vector<std::string> Classes() const;
  uint64_t TotalBytes() const;
};

struct RandomTreeOptions {
  int files = 60;
  int dirs = 12;                        // directories to spread the files over (nested randomly)
  uint64_t max_file_bytes = 200 << 10;  // sizes are skewed towards small; ~10 % are empty
  // ImageFolder layout: `classes` top-level directories, every file inside one of them.
  bool image_folder = false;
  int classes = 5;
};

// A random tree drawn from stoker::Pcg32(seed): nested directories, names with unicode, spaces
// and dots, sizes from 0 to max_file_bytes. The same seed always gives the same tree.
Tree RandomTree(uint64_t seed, const RandomTreeOptions& options = {});

// Random bytes from a seeded generator.
std::string RandomBytes(uint64_t seed, size_t n);

// Writes every file of `tree` under `root` (creating directories as needed).
void WriteTree(const Tree& tree, const std::string& root);

std::string ReadFileToString(const std::string& path);
void WriteStringToFile(const std::string& path, std::string_view contents);
// The same through a Storage (gtest failures, not errors, when it refuses).
std::string ReadStored(Storage& storage, std::string_view path);
void WriteStored(Storage& storage, std::string_view path, std::string_view contents);

// Bytes <-> string views, for comparing dataset reads with tree contents.
inline std::string_view AsString(const std::vector<std::byte>& bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}
inline std::span<const std::byte> AsBytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

// FileBytes over an owned string (for opening snapshot bytes without a storage).
std::shared_ptr<const FileBytes> BytesOf(std::string contents);

// A pack source over an in-memory tree, in path order (the order a directory source uses).
std::unique_ptr<dataset::PackSource> TreeSource(const Tree& tree);

// A format-1 dataset of `tree` at version 3, written the way stoker 0.1's packer wrote it: one
// chunk per 4 files, a snapshot, a MANIFEST (files ending in ".x" get an attribute).
void WriteFormat1(Storage& storage, const Tree& tree, format::LabelMode labels);

// Pack a directory into `dst` with OpenDirectorySource, as `stoker pack SRC DST` does.
Result<dataset::PackSummary> PackDirectory(const std::string& src, Storage& dst,
                                           const dataset::PackOptions& options = {});
// Pack tar shards into `dst` (group_samples is set for you).
Result<dataset::PackSummary> PackTars(std::vector<std::string> tars, Storage& dst,
                                      dataset::PackOptions options = {});

// One tar member. Regular files carry `data`; links carry `link_target`.
struct TarMember {
  enum class Type { kFile, kDir, kSymlink, kHardlink, kCharDevice, kFifo };
  std::string name;
  std::string data;
  Type type = Type::kFile;
  std::string link_target;
};

TarMember File(std::string name, std::string data);
// A member of another type (symlink, hard link, device, FIFO, directory); `target` for links.
TarMember Special(TarMember::Type type, std::string name, std::string target = "");

// Writes a pax tar (libarchive's writer, which stores names verbatim: absolute and '..' names
// reach the reader as written).
void WriteTar(const std::string& path, const std::vector<TarMember>& members);

// WebDataset sample: key.cls (decimal label), key.jpg (random bytes), key.json, and optionally
// key.seg.png (a member name with several dots: it still belongs to `key`).
struct WdsSample {
  std::string key;  // no '.'; may contain '/' (a directory inside the shard)
  std::string jpg;
  int label = 0;
  std::string json;
  std::string seg;  // empty: no key.seg.png member
};
std::vector<WdsSample> RandomWdsSamples(uint64_t seed, int count, int classes,
                                        std::string_view key_prefix);
std::vector<TarMember> WdsMembers(const std::vector<WdsSample>& samples);

// The names of the chunk files under a POSIX dataset directory (empty if there is none).
std::vector<std::string> ChunkFiles(const std::string& dataset_dir);

}  // namespace stoker::test
