// `stoker gc`: removes old versions and the files that no kept version uses (docs/format.md §6).
//
// Safe beside readers and writers by a grace period rather than a lock: a file that no kept
// version references is only deleted once gc has seen it unreferenced for `grace`. A writer's
// chunks and segment are unreferenced until it publishes, so a pack must finish within the
// grace period (24 h by default; the packer also checks its chunks still exist just before it
// publishes). A reader of a removed version can go on reading it for the grace period.
// gc keeps its sightings in `gc/pending`; two gc runs at once are safe (the later rewrite wins,
// which can only postpone a deletion).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "stoker/storage.h"

namespace stoker::dataset {

struct GcOptions {
  uint64_t keep = 1;  // the newest versions kept (at least 1)
  // Also keep every version created less than this long ago.
  std::optional<std::chrono::seconds> keep_for;
  std::chrono::seconds grace{24 * 3600};
  bool dry_run = false;  // report, delete nothing
  uint64_t now_unix_seconds = 0;  // 0: the clock (tests pass a time)

  Status Validate() const;
};

struct GcSummary {
  std::vector<uint64_t> versions_removed;
  std::vector<uint64_t> versions_kept;
  std::vector<std::string> files_removed;  // chunks, segments, leftovers of crashed writers
  uint64_t files_pending = 0;  // unreferenced, within the grace period: a later gc removes them
};

Result<GcSummary> CollectGarbage(Storage& storage, const GcOptions& options);

}  // namespace stoker::dataset
