// `stoker gc`: removes old versions and the files that no kept version uses (docs/format.md §6).
//
// Safe beside readers and writers without a lock. A file that no kept version references is
// only deleted once gc has seen it unreferenced for `grace` (so a reader of a removed version
// can go on reading it that long) and no writer that was at work when gc first saw it is still
// at work: writers hold leases (dataset/writer_lease.h), so an unpublished writer's chunks and
// segment stay whatever the grace period. A lease unchanged for `writer_timeout` is a dead
// writer's: gc removes it, and at once when the lease names a process on this machine that is
// gone (killed, crashed: ParseLeaseHolder). While no version was ever removed (the first
// version's record is there, or none was ever published), no reader can need an unreferenced
// file — none was ever published — so such files go without the grace period once no writer at
// work holds them: what a killed pack left. gc keeps its sightings in `gc/pending`; two gc runs at
// once are safe (the later rewrite wins, which can only postpone a deletion).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dataset/parts.h"
#include "stoker/storage.h"

namespace stoker::dataset {

struct GcOptions {
  uint64_t keep = 1;  // the newest versions kept (at least 1)
  // Also keep every version created less than this long ago.
  std::optional<std::chrono::seconds> keep_for;
  std::chrono::seconds grace{24 * 3600};
  // A writer's lease whose content gc has seen unchanged this long is a dead writer's. While
  // writers run it must span several heartbeats (kLeaseHeartbeat); 0 treats every lease as
  // dead (only when no writer runs: to reclaim what killed writers left at once).
  std::chrono::seconds writer_timeout{600};
  bool dry_run = false;           // report, delete nothing
  uint64_t now_unix_seconds = 0;  // 0: the clock (tests pass a time)

  Status Validate() const;
};

struct GcSummary {
  std::vector<uint64_t> versions_removed;
  std::vector<uint64_t> versions_kept;
  std::vector<std::string> files_removed;  // chunks, segments, leftovers of crashed writers
  // Unreferenced, within the grace period or perhaps a writer's at work: a later gc removes them.
  uint64_t files_pending = 0;
  uint64_t files_held_for_writers = 0;    // of those, the ones held back for writers at work
  uint64_t writers_active = 0;            // live leases
  std::vector<uint64_t> writers_expired;  // leases gc found dead (and removed)
  // Leases whose process is gone from this machine (and removed at once): writer, "pid P on H".
  std::vector<std::pair<uint64_t, std::string>> writers_gone;
  // Of files_removed, those no version ever used, removed without the grace period.
  uint64_t files_never_published = 0;
  // Jobs whose parts wait for a commit (their chunks are kept): a job an engine's driver left
  // behind when it died stays so until `stoker commit --job J` or `--discard` ends it.
  std::vector<OpenJob> open_jobs;
};

Result<GcSummary> CollectGarbage(Storage& storage, const GcOptions& options);

}  // namespace stoker::dataset
