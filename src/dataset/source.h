// Where `stoker pack` gets files from: a directory tree or tar shards. A source yields items in
// a fixed order and reports hostile or broken input (escaping symlinks, device files, absolute
// or '..' tar members, unreadable files) as an error naming the offending file.
// Not thread-safe: one consumer calls Next().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "stoker/status.h"

namespace stoker::dataset {

struct SourceItem {
  std::string path;  // relative path inside the dataset, validated
  std::vector<std::byte> bytes;
};

class PackSource {
 public:
  virtual ~PackSource() = default;
  // The next item, or nullopt when the source is exhausted.
  virtual Result<std::optional<SourceItem>> Next() = 0;
  // Totals for progress reporting; 0 where unknown in advance.
  virtual uint64_t total_items() const = 0;
  virtual uint64_t total_bytes() const = 0;
  // Bytes of input consumed so far (tar: compressed bytes), for progress against total_bytes.
  virtual uint64_t consumed_bytes() const = 0;
};

struct DirectorySourceOptions {
  int threads = 4;                        // parallel file reads
  uint64_t window_bytes = 256ull << 20;   // read-ahead limit
};

// Every regular file under `root`, in path order. Symlinks are followed only to regular files
// inside `root`.
Result<std::unique_ptr<PackSource>> OpenDirectorySource(const std::string& root,
                                                        const DirectorySourceOptions& options);

// The regular-file members of the given tar archives (any compression libarchive reads), shard
// by shard, in archive order.
Result<std::unique_ptr<PackSource>> OpenTarSource(std::vector<std::string> tar_paths);

}  // namespace stoker::dataset
