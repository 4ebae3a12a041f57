// Builds the bytes of a metadata snapshot from a list of packed files (docs/format.md §A.3).
// Pure function of its input: no I/O, so it is unit-testable and deterministic.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "format/chunk.h"
#include "format/snapshot_layout.h"
#include "stoker/status.h"

namespace stoker::format {

struct SnapshotEntry {
  std::string path;    // relative, '/'-separated, already validated by ValidateRelativePath
  uint32_t chunk = 0;  // index into SnapshotSpec::chunks
  uint64_t offset = 0;
  uint32_t length = 0;
  uint32_t crc32c = 0;
  int32_t label = kNoLabel;  // read only with LabelMode::kExplicit
  std::vector<std::pair<std::string, std::string>> attributes;
};

enum class LabelMode : uint8_t {
  kNone,            // no labels
  kFirstDirectory,  // ImageFolder: class = first path component, indices in sorted order
  kExplicit,        // entries carry labels (e.g. WebDataset .cls members)
};

struct SnapshotSpec {
  uint64_t dataset_version = 1;
  uint64_t created_unix_seconds = 0;
  std::vector<ChunkInfo> chunks;
  std::vector<SnapshotEntry> entries;
  LabelMode labels = LabelMode::kNone;
  // WebDataset: files in one directory whose names agree up to the first '.' form one sample.
  bool group_by_key = false;
};

// The snapshot file's bytes. InvalidArgument for duplicate paths, a path that is both a file
// and a directory, or names too long for the format.
Result<std::string> BuildSnapshot(SnapshotSpec spec);

// Checks a relative path as stored in a dataset: non-empty '/'-separated components, none of
// them "", "." or "..", no NUL, no leading '/', each at most 255 bytes, 4,096 in all.
Status ValidateRelativePath(std::string_view path);

// The sample a file belongs to in a grouped (tar) dataset: its directory and its name up to
// the first '.' ("train/s0/000017.seg.png" -> "train/s0/000017").
std::string_view SampleKeyOf(std::string_view path);

}  // namespace stoker::format
