#include "dataset/upgrade.h"

#include <ctime>
#include <string>

#include <fmt/format.h>

#include "dataset/commit_version.h"
#include "dataset/format1.h"
#include "dataset/writer_lease.h"
#include "format/segment.h"
#include "format/segment_builder.h"
#include "format/segment_layout.h"
#include "format/versions.h"

namespace stoker::dataset {
namespace {

// The format-2 segment holding every file of a format-1 snapshot, with the same chunks, labels,
// classes and attributes.
format::SegmentSpec SpecOf(const format::Snapshot& snap) {
  format::SegmentSpec spec;
  if (snap.grouped()) spec.flags |= format::kSegmentGrouped;
  if (snap.labelled()) spec.flags |= format::kSegmentLabelled;
  if (snap.labels_from_directories()) spec.flags |= format::kSegmentLabelsFromDirs;
  for (uint32_t k = 0; k < snap.class_count(); ++k) spec.classes.emplace_back(snap.class_name(k));
  for (uint32_t c = 0; c < snap.chunk_count(); ++c) {
    const format::ChunkRecord r = snap.chunk(c);
    spec.chunks.push_back({r.id, r.file_size, r.data_crc32c, r.entry_count});
  }
  spec.files.reserve(snap.file_count());
  for (uint32_t f = 0; f < snap.file_count(); ++f) {
    const format::FileRecord r = snap.file(f);
    format::SegmentFile file;
    file.path = snap.FilePath(f);
    file.chunk = r.chunk;
    file.offset = r.offset;
    file.length = r.length;
    file.crc32c = r.crc32c;
    file.label = r.label;
    for (const auto& [k, v] : snap.FileAttributes(f)) file.attributes.emplace_back(k, v);
    spec.files.push_back(std::move(file));
  }
  return spec;
}

}  // namespace

Result<UpgradeSummary> Upgrade(Storage& storage) {
  STOKER_ASSIGN_OR_RETURN(auto latest, format::ReadLatestVersion(storage));
  if (latest) {
    return Err(Status::AlreadyExists(fmt::format("{} is already in format 2 (version {})",
                                                 storage.Describe(""), latest->version)));
  }
  STOKER_ASSIGN_OR_RETURN(auto manifest, ReadFormat1Manifest(storage));
  if (!manifest) {
    return Err(Status::NotFound(storage.Describe("") + " holds no dataset (no MANIFEST)"));
  }
  STOKER_ASSIGN_OR_RETURN(auto snap, OpenSnapshot(storage, *manifest, /*verify_checksum=*/true));
  STOKER_ASSIGN_OR_RETURN(std::string bytes, format::BuildSegment(SpecOf(*snap)));
  // Before the segment exists: gc holds back what a writer with a lease writes.
  STOKER_ASSIGN_OR_RETURN(auto lease, WriterLease::Take(storage));

  STOKER_ASSIGN_OR_RETURN(
      auto written,
      format::WriteSegment(storage, [&](format::SegmentSink& sink) { return sink.Append(bytes); }));
  const format::SegmentInfo& info = written.segment->info();

  UpgradeSummary summary;
  summary.version = manifest->version;
  summary.files = info.file_count;
  summary.chunks = info.chunk_count;
  summary.classes = info.class_count;
  summary.segment_bytes = bytes.size();
  STOKER_RETURN_IF_ERROR(
      written.segment->ForEachFile([&](uint64_t position, std::string_view p, uint64_t) {
        if (snap->FilePath(static_cast<uint32_t>(position)) != p) summary.indices_preserved = false;
        return Status::OK();
      }));

  VersionCommit commit;
  commit.prepare = [&](const std::optional<format::VersionRecord>& newest,
                       int /*attempt*/) -> Result<format::VersionRecord> {
    if (newest) {  // another upgrade, or a format-2 pack, published meanwhile
      return Err(Status::AlreadyExists(fmt::format("{} is already in format 2 (version {})",
                                                   storage.Describe(""), newest->version)));
    }
    format::VersionRecord record;
    record.version = manifest->version;  // format 1's version numbers go on
    record.created_unix_seconds = static_cast<uint64_t>(std::time(nullptr));
    record.writer = lease->writer();
    record.flags = info.flags;
    format::AppendSegment(record, written);
    return record;
  };
  commit.abandon = [&](bool) { (void)storage.Remove(written.path); };
  if (auto committed = CommitVersion(storage, *lease, commit); !committed) {
    return Err(committed.error());
  }
  return summary;
}

}  // namespace stoker::dataset
