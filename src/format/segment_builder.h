// Builds metadata segments (docs/format.md §3).
//
// SegmentBuilder streams: files are added in any order, sorted by key in bounded memory
// (ExternalSorter, spilling to temporary files), and the segment is written to a sink section
// by section, so that a writer's memory does not grow with the number of files it adds (only
// with its directories and classes; block indexes go to spools too). What depends on
// the version the segment extends (first file, sample and label, the labels of class
// directories) is given only when writing, so a writer that loses a publish race writes its
// segment again with new numbers without sorting again.
//
// BuildSegment() builds a whole segment in memory from a SegmentSpec (tests, tools, upgrade).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/external_sorter.h"
#include "common/spool.h"
#include "format/chunk.h"
#include "stoker/status.h"
#include "stoker/storage.h"

namespace stoker::format {

using Attribute = std::pair<std::string, std::string>;

// One file as its writer adds it.
struct SegmentEntry {
  std::string_view path;  // relative, '/'-separated; checked by ValidateRelativePath
  uint32_t chunk = 0;     // index into the chunks given to Seal()
  uint64_t entry = 0;     // its rank in the chunk's storage order (0, 1, ...): offsets follow
  uint64_t length = 0;
  uint32_t crc32c = 0;
  int32_t label = -1;  // the input's own label (a tar sample's .cls member), -1 for none
  std::span<const Attribute> attributes;
};

// Where the labels a segment stores come from.
enum class LabelSource : uint8_t {
  kNone,   // no labels
  kInput,  // the entries' own (SegmentEntry::label)
  kDirs,   // the file's first-level directory's: SegmentNumbering::dir_labels
};

// What a segment says that depends on the version it extends (docs/format.md §3.1).
struct SegmentNumbering {
  uint32_t flags = 0;       // kSegment* flags of segment_layout.h
  uint64_t first_file = 0;  // index of the segment's first file in the dataset
  uint64_t first_sample = 0;
  uint32_t first_label = 0;          // the label of classes[0]
  std::vector<std::string> classes;  // names of the classes this segment adds
  LabelSource labels = LabelSource::kNone;
  // With LabelSource::kDirs: the label of each of first_level_dirs(), in its order.
  std::vector<int32_t> dir_labels;
};

enum class Grouping : uint8_t {
  kFiles,    // every file is a sample
  kSamples,  // files sharing a directory and a name up to the first '.' form one sample
  // ... and every file of a sample gets the label one of them carries (a tar sample's .cls)
  kSamplesSharingLabels,
};

// A byte sink that a segment is written to, keeping count of what it took.
class SegmentSink {
 public:
  virtual ~SegmentSink() = default;
  virtual Status Append(std::string_view bytes) = 0;
};

// Collects a segment in memory.
class InMemorySegmentSink : public SegmentSink {
 public:
  Status Append(std::string_view b) override {
    bytes.append(b);
    return Status::OK();
  }
  std::string bytes;
};

// Streams a segment into a file, in blocks of 1 MiB; Flush() writes out the rest.
class WritableFileSink : public SegmentSink {
 public:
  explicit WritableFileSink(WritableFile& file) : file_(file) {}
  Status Append(std::string_view bytes) override;
  Status Flush();
  uint64_t size() const { return size_; }  // appended so far

 private:
  static constexpr size_t kBuffer = 1 << 20;
  WritableFile& file_;
  std::string buffer_;
  uint64_t size_ = 0;
};

class SegmentBuilder {
 public:
  explicit SegmentBuilder(SortOptions sort = {});
  ~SegmentBuilder();

  // InvalidArgument for an invalid path or two attributes of one name.
  Status Add(const SegmentEntry& entry);
  // Sorts what was added and checks it: no path twice, none both a file and a directory, and
  // the files of each chunk exactly its entries (counts and bytes).
  Status Seal(std::vector<ChunkInfo> chunks, Grouping grouping);

  // A path added twice, once Seal() found one.
  const std::optional<std::string>& duplicate_path() const;

  // After Seal():
  uint64_t file_count() const;
  uint64_t total_bytes() const;
  const std::vector<ChunkInfo>& chunks() const;
  // The first path components of the files inside some directory, sorted (class directories).
  const std::vector<std::string>& first_level_dirs() const;
  // A path with no directory, if any file has one.
  const std::optional<std::string>& a_file_outside_dirs() const;
  int32_t max_label() const;  // the largest input label; -1 if none
  // Every file key (FileKeyOf), in order.
  Status ForEachKey(const std::function<Status(std::string_view key)>& fn) const;

  // Writes the segment; may be called again with other numbers. InvalidArgument for a label
  // with no class.
  Status Write(const SegmentNumbering& numbering, SegmentSink& sink) const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// ---- In memory, from a complete description.

struct SegmentFile {
  std::string path;
  uint32_t chunk = 0;  // index into SegmentSpec::chunks
  uint64_t offset = 0;
  uint64_t length = 0;
  uint32_t crc32c = 0;
  int32_t label = -1;  // -1: none
  std::vector<Attribute> attributes;
};

struct SegmentSpec {
  uint32_t flags = 0;
  uint64_t first_file = 0;
  uint64_t first_sample = 0;
  uint32_t first_label = 0;
  std::vector<std::string> classes;
  // The chunks this segment's files lie in; every chunk's entries are exactly these files.
  std::vector<ChunkInfo> chunks;
  std::vector<SegmentFile> files;  // any order: the builder sorts them by path
};

// InvalidArgument for duplicate paths, a path that is both a file and a directory, a label
// outside [-1, first_label + classes), or files that do not tile their chunks exactly.
Result<std::string> BuildSegment(const SegmentSpec& spec);

}  // namespace stoker::format
