// Builds the bytes of a metadata segment (docs/format.md §3) from the files one writer adds.
// Pure function of its input: no I/O, deterministic, unit-testable.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "format/chunk.h"
#include "stoker/status.h"

namespace stoker::format {

struct SegmentFile {
  std::string path;    // relative, '/'-separated; checked by ValidateRelativePath
  uint32_t chunk = 0;  // index into SegmentSpec::chunks
  uint64_t offset = 0;
  uint64_t length = 0;
  uint32_t crc32c = 0;
  int32_t label = -1;  // -1: none
  std::vector<std::pair<std::string, std::string>> attributes;
};

struct SegmentSpec {
  uint32_t flags = 0;        // kSegment* flags of segment_layout.h
  uint64_t first_file = 0;   // index of this segment's first file in the dataset
  uint64_t first_sample = 0;
  uint32_t first_label = 0;  // the label of classes[0]
  std::vector<std::string> classes;  // names of the classes this segment adds
  // The chunks this segment's files lie in; every chunk's entries are exactly these files.
  std::vector<ChunkInfo> chunks;
  std::vector<SegmentFile> files;  // any order: the builder sorts them by path
};

// InvalidArgument for duplicate paths, a path that is both a file and a directory, a label
// outside [-1, first_label + classes), or files that do not tile their chunks exactly.
Result<std::string> BuildSegment(const SegmentSpec& spec);

}  // namespace stoker::format
