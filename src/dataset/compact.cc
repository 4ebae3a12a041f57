#include "dataset/compact.h"

#include <algorithm>
#include <ctime>

#include <fmt/format.h>

#include "dataset/commit_version.h"
#include "dataset/version_view.h"
#include "dataset/writer_lease.h"
#include "format/segment_merge.h"
#include "format/versions.h"

namespace stoker::dataset {
namespace {

// `base`'s record with segments [first, end) replaced by `merged`; totals are unchanged, since
// the merged segment holds exactly what they held.
format::VersionRecord Replace(const format::VersionRecord& base, size_t first, size_t end,
                              const format::SegmentRef& merged, uint64_t writer) {
  format::VersionRecord r = base;
  r.version = base.version + 1;
  r.parent = base.version;
  r.created_unix_seconds = static_cast<uint64_t>(std::time(nullptr));
  r.writer = writer;
  r.segments.erase(r.segments.begin() + static_cast<std::ptrdiff_t>(first),
                   r.segments.begin() + static_cast<std::ptrdiff_t>(end));
  r.segments.insert(r.segments.begin() + static_cast<std::ptrdiff_t>(first), merged);
  return r;
}

}  // namespace

std::pair<size_t, size_t> SegmentsToMerge(std::span<const format::SegmentRef> segments, bool all) {
  const size_t n = segments.size();
  if (n < 2) return {n, n};
  if (all) return {0, n};
  size_t first = n - 1;
  uint64_t after = segments[first].files;
  while (first > 0 && segments[first - 1].files <= after) {
    --first;
    after += segments[first].files;
  }
  return n - first >= 2 ? std::pair(first, n) : std::pair(n, n);
}

Result<CompactSummary> Compact(Storage& storage, const CompactOptions& options) {
  STOKER_ASSIGN_OR_RETURN(auto latest, format::ReadLatestVersion(storage));
  if (!latest) {
    return Err(Status::NotFound(fmt::format("{} holds no dataset", storage.Describe(""))));
  }
  CompactSummary summary;
  summary.base_version = latest->version;
  summary.segments_before = summary.segments_after = latest->segments.size();
  const auto [first, end] = SegmentsToMerge(latest->segments, options.all);
  if (first == end) return summary;
  summary.segments_merged = end - first;
  summary.segments_after = summary.segments_before - summary.segments_merged + 1;
  for (size_t j = first; j < end; ++j) {
    summary.files_merged += latest->segments[j].files;
    summary.bytes_read += latest->segments[j].bytes;
  }
  if (options.dry_run) return summary;

  // Before the merged segment exists: gc holds back what a writer with a lease writes.
  STOKER_ASSIGN_OR_RETURN(auto lease, WriterLease::Take(storage));
  // The view checks every segment against the record before anything is merged.
  STOKER_ASSIGN_OR_RETURN(auto view, VersionView::Open(storage, *latest));
  std::vector<const format::Segment*> inputs;
  for (size_t j = first; j < end; ++j) inputs.push_back(&view->segment(j));
  STOKER_ASSIGN_OR_RETURN(auto written,
                          format::WriteSegment(storage, [&](format::SegmentSink& sink) {
                            return format::MergeSegments(inputs, options.sort, sink);
                          }));
  summary.bytes_written = written.bytes;
  const format::SegmentRef merged = format::RefOf(written);
  const std::vector<format::SegmentRef> run(
      latest->segments.begin(), latest->segments.begin() + static_cast<std::ptrdiff_t>(end));

  VersionCommit commit;
  bool listed = false;  // a version lists the merged segment: it must never be removed
  commit.prepare = [&](const std::optional<format::VersionRecord>& newest,
                       int /*attempt*/) -> Result<format::VersionRecord> {
    // The newest version may be newer than the one merged (a writer published meanwhile).
    // Appends only add segments after the merged run, so the merged segment still stands for
    // it; anything else (another compaction) is a conflict.
    if (newest && std::find(newest->segments.begin(), newest->segments.end(), merged) !=
                      newest->segments.end()) {
      listed = true;
      return Err(Status::Internal(
          fmt::format("version {} lists this compaction's segment although its publish was refused",
                      newest->version)));  // never removes a segment a version lists
    }
    if (!newest || newest->segments.size() < end ||
        !std::equal(run.begin(), run.end(), newest->segments.begin())) {
      return Err(Status::AlreadyExists(fmt::format(
          "version {} of {} changed the segments this compaction merged (another compaction?); "
          "nothing was published",
          newest ? newest->version : 0, storage.Describe(""))));
    }
    return Replace(*newest, first, end, merged, lease->writer());
  };
  commit.abandon = [&](bool final) {
    if (final && !listed) (void)storage.Remove(written.path);
  };
  auto committed = CommitVersion(storage, *lease, commit);
  if (!committed) {
    // Perhaps published after all (an error the store could not resolve): the segment stays,
    // and gc removes it after its grace period if no version lists it.
    return Err(committed.error().WithContext("publishing the compacted version"));
  }
  summary.version = committed->record.version;
  summary.publish_attempts = committed->attempts;
  return summary;
}

}  // namespace stoker::dataset
