#include "dataset/commit_version.h"

#include <fmt/format.h>

#include "common/retry.h"
#include "format/versions.h"

namespace stoker::dataset {
namespace {

// Pauses below 1 ms, 2 ms, ... up to 256 ms between offers: a few ms spread a handful of writers
// that collided; hundreds of writers of one dataset back off to a fraction of a second.
constexpr RetryPolicy kCommitRetry{.max_attempts = kMaxCommitAttempts,
                                   .base_backoff = std::chrono::milliseconds(1),
                                   .max_backoff = std::chrono::milliseconds(256)};

}  // namespace

Result<Committed> CommitVersion(Storage& storage, WriterLease& lease, const VersionCommit& commit) {
  Retry retry(kCommitRetry);
  Status lost;  // the last offer's refusal
  while (retry.Again()) {
    if (retry.attempt() > 1) commit.abandon(/*final=*/false);
    auto latest = format::ReadLatestVersion(storage);
    if (!latest) {
      commit.abandon(/*final=*/true);
      return Err(latest.error());
    }
    auto record = commit.prepare(*latest, retry.attempt());
    Status stop = record ? lease.Check() : record.error();
    if (!stop.ok()) {
      commit.abandon(/*final=*/true);
      return Err(stop);
    }
    lost = format::PublishVersionRecord(storage, *record);
    if (lost.ok()) return Committed{std::move(*record), retry.attempt()};
    // Taken by another writer: rebase. Anything else may have been published after all.
    if (!lost.IsAlreadyExists()) return Err(lost);
  }
  commit.abandon(/*final=*/true);
  return Err(
      lost.WithContext(fmt::format("gave up after {} attempts to publish", retry.attempt())));
}

}  // namespace stoker::dataset
