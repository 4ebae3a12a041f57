// The versions of a format-2 dataset (docs/format.md §4-5): `versions/<v>.version` records,
// each created exclusively, so that publishing version v is a compare-and-swap that exactly one
// writer wins. Listing them is how the newest version is found: there is no pointer file that a
// crashed or racing writer could leave stale and readers would trust.
//
// No listing (a web server: Storage::List is Unsupported): the records that exist form one run
// [oldest, newest] — versions are published one after another and gc removes the oldest — so
// readers find its ends by probing record names, from version 1 up by doubling steps, then
// bisecting: O(log n) requests. Once gc has removed version 1, they start from the version
// `versions/latest` names: gc writes that hint (the newest version it saw) before it removes
// any version, so it is never below the run; it is never trusted, only where probing starts.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <functional>

#include "format/segment.h"
#include "format/segment_builder.h"
#include "format/version_record.h"
#include "stoker/storage.h"

namespace stoker::format {

inline constexpr std::string_view kLatestHintPath = "versions/latest";

// Published versions, ascending; empty if the location holds none.
Result<std::vector<uint64_t>> ListVersions(Storage& storage);

// Replaces the hint with `version` (written aside, then renamed into place, so that no reader
// sees part of it). gc calls it before it removes versions.
Status WriteLatestHint(Storage& storage, uint64_t version);

// The record of version `version` (NotFound if it was never published or was collected).
Result<VersionRecord> ReadVersion(Storage& storage, uint64_t version);

// The newest version's record; nullopt if there is none.
Result<std::optional<VersionRecord>> ReadLatestVersion(Storage& storage);

// Creates `path` holding `bytes` unless it exists. An error that may have come after the store
// created it (a lost reply) is resolved by reading it back: OK if it holds exactly `bytes`,
// AlreadyExists if it holds something else.
Status CreateExclusiveOrConfirm(Storage& storage, std::string_view path, std::string_view bytes,
                                uint64_t limit);

// A segment stored under a fresh random name, durably, and read back with full validation, so
// that nothing is published that readers would reject.
struct WrittenSegment {
  uint64_t id = 0;
  std::string path;
  uint64_t bytes = 0;
  std::unique_ptr<Segment> segment;
};
// Internal if the stored segment fails validation (it is removed again).
// `write` streams the segment's bytes into the sink (SegmentBuilder::Write).
Result<WrittenSegment> WriteSegment(Storage& storage,
                                    const std::function<Status(SegmentSink&)>& write);

// The line of a version record that lists `written`.
SegmentRef RefOf(const WrittenSegment& written);

// Appends `written` to `record`'s segments and adds its counts to the totals.
void AppendSegment(VersionRecord& record, const WrittenSegment& written);

// Publishes `record` as version record.version, unless that version exists: then
// AlreadyExists, and the caller rebases on the newer version and tries again. A reply lost on
// the way (a network error after the store created the record) is resolved by reading the
// record back: if it holds exactly these bytes, this writer won.
Status PublishVersionRecord(Storage& storage, const VersionRecord& record);

}  // namespace stoker::format
