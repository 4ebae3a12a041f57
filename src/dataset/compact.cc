#include "dataset/compact.h"

#include <chrono>
#include <ctime>
#include <thread>

#include <fmt/format.h>

#include "common/random.h"
#include "dataset/version_view.h"
#include "dataset/writer_lease.h"
#include "format/segment_merge.h"
#include "format/versions.h"

namespace stoker::dataset {
namespace {

constexpr int kMaxPublishAttempts = 1000;

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

  const uint64_t writer = lease->writer();  // the id its record and its lease carry
  Pcg32 jitter(writer);
  format::VersionRecord base = *latest;
  for (int attempt = 0;; ++attempt) {
    const format::VersionRecord record = Replace(base, first, end, merged, writer);
    if (Status held = lease->Check(); !held.ok()) {
      (void)storage.Remove(written.path);
      return Err(held);
    }
    const Status published = format::PublishVersionRecord(storage, record);
    if (published.ok()) {
      summary.version = record.version;
      summary.publish_attempts = attempt + 1;
      return summary;
    }
    if (published.code() != StatusCode::kAlreadyExists) {
      // Perhaps published after all (a reply lost and unreadable): the segment stays, and gc
      // removes it after its grace period if no version lists it.
      return Err(published.WithContext("publishing the compacted version"));
    }
    if (attempt + 1 >= kMaxPublishAttempts) {
      (void)storage.Remove(written.path);
      return Err(published.WithContext(
          fmt::format("gave up after {} attempts to publish", kMaxPublishAttempts)));
    }
    // Another writer published first. Appends only add segments after the merged run, so the
    // merged segment still stands for it; anything else (another compaction) is a conflict.
    STOKER_ASSIGN_OR_RETURN(auto newer, format::ReadLatestVersion(storage));
    if (newer && std::find(newer->segments.begin(), newer->segments.end(), merged) !=
                     newer->segments.end()) {
      return Err(Status::Internal(
          fmt::format("version {} lists this compaction's segment although its publish was refused",
                      newer->version)));  // never removes a segment a version lists
    }
    if (!newer || newer->segments.size() < end ||
        !std::equal(run.begin(), run.end(), newer->segments.begin())) {
      (void)storage.Remove(written.path);
      return Err(Status::AlreadyExists(fmt::format(
          "version {} of {} changed the segments this compaction merged (another compaction?); "
          "nothing was published",
          newer ? newer->version : 0, storage.Describe(""))));
    }
    base = *newer;
    std::this_thread::sleep_for(
        std::chrono::microseconds(jitter.Below(1000u << std::min(attempt, 8))));
  }
}

}  // namespace stoker::dataset
