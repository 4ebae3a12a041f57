// `stoker compact`: merges a version's segments into fewer, larger ones (docs/format.md §3.5,
// §5.4), as an LSM tree compacts its sorted runs. Every append adds a segment, and a lookup by
// path checks each segment whose key range could hold it, so a dataset appended to daily needs
// its segments merged now and then. The result is published as a new version that says
// exactly what the old one said — every path, index, label, sample, attribute and chunk the
// same — with fewer segments. Chunks are never rewritten; old segments stay (older versions
// list them) until `stoker gc` removes those versions.
//
// Which segments: by default a tiered policy that keeps write amplification logarithmic —
// the longest run of trailing segments in which each is no larger (in files) than all those
// after it together, so small appends merge with each other, and into large segments only
// once they add up to as much. `all` merges every segment into one.
//
// Concurrency: like any writer, compaction publishes by creating the next version record
// exclusively. If another writer publishes first, it rebases: appends only add segments after
// the merged ones, so the merged segment still stands for the same run; if the run itself
// changed (another compaction), it fails without publishing.
#pragma once

#include <cstdint>
#include <span>
#include <utility>

#include "common/external_sorter.h"
#include "format/version_record.h"
#include "stoker/storage.h"

namespace stoker::dataset {

struct CompactOptions {
  bool all = false;      // merge every segment into one
  bool dry_run = false;  // report the plan, write nothing
  SortOptions sort;
};

struct CompactSummary {
  uint64_t base_version = 0;  // the version compacted
  uint64_t version = 0;       // the version published (0: nothing to do, or a dry run)
  uint64_t segments_before = 0, segments_after = 0;
  uint64_t segments_merged = 0;  // how many became one (0: nothing to do)
  uint64_t files_merged = 0;     // files of the merged segments
  uint64_t bytes_read = 0;       // metadata bytes of the merged segments
  uint64_t bytes_written = 0;    // of the merged segment
  int publish_attempts = 0;
};

// The run [first, end) of `segments` to merge under the policy above; empty (first == end)
// when there is nothing to merge.
std::pair<size_t, size_t> SegmentsToMerge(std::span<const format::SegmentRef> segments, bool all);

// NotFound if there is no dataset; AlreadyExists if another compaction changed the segments
// first (nothing is published then).
Result<CompactSummary> Compact(Storage& storage, const CompactOptions& options);

}  // namespace stoker::dataset
