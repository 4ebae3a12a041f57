// The one way a writer publishes a version (docs/format.md §5), for `pack`, `pack --append`,
// `commit`, `compact` and `upgrade`: read the newest version, prepare the record of the next one
// on top of it (writing first whatever the record names, such as a segment), and offer it with
// format::PublishVersionRecord, which refuses a version number another writer has taken. A
// writer that loses the number rebases: it reads the newer version and prepares again — or
// stops with the error its preparation returns, when the newer version conflicts with what it
// adds — after a random pause (common/retry) that spreads colliding writers apart.
//
// The writer's lease is checked right before each offer: a writer frozen for longer than gc's
// --writer-timeout may have lost the files it wrote to gc, and never publishes a version that
// names them.
#pragma once

#include <functional>
#include <optional>

#include "dataset/writer_lease.h"
#include "format/version_record.h"
#include "stoker/storage.h"

namespace stoker::dataset {

// Offers to publish before a writer gives up; each loss means another version was published
// meanwhile, so this bounds only a writer starved by a thousand others.
inline constexpr int kMaxCommitAttempts = 1000;

struct VersionCommit {
  // The record to offer on top of `latest` (nullopt: no version yet), on the `attempt`-th offer
  // (1 first). An error stops the commit with nothing published.
  std::function<Result<format::VersionRecord>(const std::optional<format::VersionRecord>& latest,
                                              int attempt)>
      prepare;
  // Drops what `prepare` wrote that the next attempt does not reuse: called with final=false
  // after a lost race (before preparing again), with final=true when the commit stops without
  // publishing (a preparation's error, the lease lost, attempts used up). Not called when the
  // offer failed otherwise (an I/O error): it may have been published after all, so what it
  // names stays, and gc removes it later if no version lists it.
  std::function<void(bool final)> abandon = [](bool) {};
};

struct Committed {
  format::VersionRecord record;  // as published
  int attempts = 0;              // offers made, the published one included
};

Result<Committed> CommitVersion(Storage& storage, WriterLease& lease, const VersionCommit& commit);

}  // namespace stoker::dataset
