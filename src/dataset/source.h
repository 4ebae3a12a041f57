// Where `stoker pack` gets files from: a directory tree or tar shards. A source yields items in
// a fixed order and reports hostile or broken input (escaping symlinks, device files, absolute
// or '..' tar members, unreadable files) as an error naming the offending file.
// Not thread-safe: one consumer calls Next().
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/external_sorter.h"
#include "dataset/left_out.h"
#include "stoker/status.h"

namespace stoker::dataset {

// The bytes of an item too large to hold in memory, read front to back in pieces.
class ItemStream {
 public:
  virtual ~ItemStream() = default;
  // Fills `dst` with the next bytes: all of it, or an error (the input ended early, changed,
  // or could not be read), naming the item.
  virtual Status ReadExactly(std::span<std::byte> dst) = 0;
};

// Items larger than this come as a stream, not in memory (a pack's memory must not depend on
// its largest file); the packer gives each its own chunk.
inline constexpr uint64_t kStreamedItemBytes = 64ull << 20;

struct SourceItem {
  std::string path;              // relative path inside the dataset, validated
  std::vector<std::byte> bytes;  // the item's bytes, unless it is streamed
  // A streamed item: `stream` yields exactly `streamed_size` bytes, and must be read to the end
  // before the source's next Next().
  std::unique_ptr<ItemStream> stream;
  uint64_t streamed_size = 0;
  uint64_t size() const { return stream ? streamed_size : bytes.size(); }
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
  // True when the items come permuted already (a directory source with a shuffle seed), so
  // the packer need not spread them over many open chunks to mix them.
  virtual bool permuted() const { return false; }
  // What the source left out of the pack (exclude patterns, OS litter, files outside the class
  // directories), known once the source is open.
  virtual LeftOut left_out() const { return {}; }
};

// How a directory's files become samples.
//   kTree: one sample per file; labels from the first directory level (ImageFolder).
//   kWebDataset: files sharing a key (directory and name up to the first '.') form one sample,
//     labelled by its .cls member, exactly as the same files would in a tar shard.
//   kAuto: kWebDataset when some file's name ends in ".cls" (a label member), kTree otherwise.
enum class DirectoryLayout : uint8_t { kAuto, kTree, kWebDataset };
Result<DirectoryLayout> ParseDirectoryLayout(std::string_view name);  // auto | tree | webdataset

struct DirectorySourceOptions {
  int threads = 0;                       // parallel file reads; 0: the cores, at least 2
  uint64_t window_bytes = 256ull << 20;  // read-ahead limit
  // Where files land in chunks: path order (nullopt; ImageFolder trees end up in class order,
  // each chunk one class), or a random permutation from this seed, so that every chunk mixes
  // classes and chunk-wise shuffle needs only a small window. Sample indices and paths are the
  // same either way: the metadata is always in path order.
  // (A WebDataset folder is permuted by sample, so that a sample's files stay together.)
  std::optional<uint64_t> shuffle_seed;
  DirectoryLayout layout = DirectoryLayout::kAuto;
  // Labels come from the first directory level (`--labels auto` on a tree): when some class
  // directory holds files, files at the top level are left out (as torchvision's ImageFolder
  // does) and counted in left_out(), rather than leaving the whole dataset without labels.
  bool labels_from_dirs = true;
  // Files and directories to leave out (--exclude; the OS litter always is): see ExcludeFilter.
  std::vector<std::string> exclude;
  // The walk's list of files is sorted into that order on disk (a tree of any size packs in
  // the same memory).
  SortOptions sort;
  // Tests: called with each file's path between the walk and its open (to change the tree
  // there, deterministically).
  std::function<void(const std::string& absolute)> before_open;
};

// Every regular file under `root` not left out (options.exclude, labels_from_dirs), in path
// order. Symlinks are followed only to regular files
// inside `root`. Sets *group_samples (if given) when the layout is, or is found to be, a
// WebDataset folder.
Result<std::unique_ptr<PackSource>> OpenDirectorySource(const std::string& root,
                                                        const DirectorySourceOptions& options,
                                                        bool* group_samples = nullptr);

// The regular-file members of the given tar archives (any compression libarchive reads), shard
// by shard, in archive order; members matching `exclude` (or the OS litter) are left out.
Result<std::unique_ptr<PackSource>> OpenTarSource(std::vector<std::string> tar_paths,
                                                  std::vector<std::string> exclude = {});

// Whether `stoker pack SRC... DST`'s sources have a shape it packs: one directory, or any
// number of tar files (not with the tree layout). InvalidArgument saying what to give instead:
// a usage error, checked before anything is read.
Status CheckPackSources(const std::vector<std::string>& sources, DirectoryLayout layout);

// What `stoker pack SRC... DST` packs: one directory tree, or any number of tar files (mixing
// them is an InvalidArgument, see CheckPackSources). Sets *group_samples for tar files and
// WebDataset folders (their samples group by key).
Result<std::unique_ptr<PackSource>> OpenPackSource(const std::vector<std::string>& sources,
                                                   const DirectorySourceOptions& options,
                                                   bool* group_samples);

}  // namespace stoker::dataset
