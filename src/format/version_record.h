// A version record (format 2, docs/format.md §4): the small text file that *is* a dataset
// version. It lists the segments that hold the version's metadata, in file-index order; a
// version is published by creating its record exclusively (Storage::CreateExclusive), so two
// writers can never both publish version v.
//
//   stoker-version 2
//   version 5
//   parent 4
//   created 1795000000
//   writer 9f0c3a1e77d2b6c5
//   flags 3
//   files 1281167
//   samples 1281167
//   classes 1000
//   chunks 2213
//   bytes 147897477120
//   columns image:jpeg label:int label=label   (column datasets only: then "stoker-version 3")
//   segment 3c1d0a9e5b7f2a60 30718512 5e1f0c2d 1271167 1271167 1000 2196
//   segment 77aa01be9c3d4f10 243105 0a1b2c3d 10000 10000 0 17
//   record-crc32c 1a2b3c4d            (CRC32C of all the bytes before this line)
//
// A segment line: id, size in bytes, the CRC32C of its footer, and its files, samples, classes
// and chunks (so readers find which segment holds file i without opening the others).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "format/layout.h"
#include "stoker/status.h"

namespace stoker::format {

inline constexpr uint64_t kMaxVersionRecordSize = 16ull << 20;

struct SegmentRef {
  uint64_t id = 0;
  uint64_t bytes = 0;
  uint32_t footer_crc32c = 0;
  uint64_t files = 0, samples = 0;
  uint64_t classes = 0, chunks = 0;
  bool operator==(const SegmentRef&) const = default;
};

struct VersionRecord {
  uint64_t version = 0;
  uint64_t parent = 0;  // the version this one extends (0: none)
  uint64_t created_unix_seconds = 0;
  uint64_t writer = 0;  // a random id of the writer that published it
  uint32_t flags = 0;   // the segments' flags (segment_layout.h)
  uint64_t files = 0, samples = 0, classes = 0, chunks = 0, bytes = 0;
  // The schema of a column dataset (dataset/columns.h, its text form); empty: not one. Every
  // version of a dataset has the same. Records with columns say "stoker-version 3", so readers
  // that predate columns refuse them as a newer format instead of misreading their samples.
  std::string columns;
  std::vector<SegmentRef> segments;
  bool operator==(const VersionRecord&) const = default;
};

// "versions/0000000000000005.version", "segments/3c1d0a9e5b7f2a60.seg"
std::string VersionRecordPath(uint64_t version);
std::string SegmentPath(uint64_t id);
// The version named by a file in versions/, or 0 if the name is not a version record's.
uint64_t VersionOfRecordName(std::string_view name);

std::string EncodeVersionRecord(const VersionRecord& r);
// Strict, like ParseManifest; also checks that the totals equal the sums over the segments.
Result<VersionRecord> ParseVersionRecord(std::string_view text);

}  // namespace stoker::format
