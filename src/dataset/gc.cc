#include "dataset/gc.h"

#include <algorithm>
#include <ctime>
#include <map>
#include <set>

#include <fmt/format.h>

#include "common/crc32c.h"
#include "common/unique_id.h"
#include "dataset/parts.h"
#include "dataset/publish.h"
#include "format/chunk.h"
#include "format/segment.h"
#include "format/text_fields.h"
#include "format/version_record.h"
#include "format/versions.h"
#include "storage/small_file.h"

namespace stoker::dataset {
namespace {

constexpr std::string_view kGcDir = "gc";
constexpr std::string_view kPendingPath = "gc/pending";
constexpr std::string_view kPendingHeader = "stoker-gc-pending 1\n";
constexpr uint64_t kMaxPendingBytes = 1ull << 30;

using Sightings = std::map<std::string, uint64_t>;  // path -> when gc first saw it unreferenced

// gc/pending: a header, "<first seen, unix seconds> <path>" lines, and "crc32c <hex>" of all
// the bytes before that line. A damaged or missing file reads as empty: that only postpones
// deletions, never hastens one.
Sightings ReadSightings(Storage& storage) {
  Sightings out;
  auto text = storage::ReadSmallFile(storage, kPendingPath, kMaxPendingBytes);
  if (!text || !text->starts_with(kPendingHeader)) return out;
  const size_t crc_line = text->rfind("crc32c ");
  if (crc_line == std::string::npos || text->back() != '\n') return out;
  const auto crc = format::ParseNumber(std::string_view(*text).substr(crc_line + 7,
                                                                      text->size() - crc_line - 8),
                                       16, "crc32c", kPendingPath);
  if (!crc || *crc != crc32c::Value(text->data(), crc_line)) return out;
  std::string_view body = std::string_view(*text).substr(kPendingHeader.size(),
                                                         crc_line - kPendingHeader.size());
  while (!body.empty()) {
    const size_t nl = body.find('\n');
    const std::string_view line = body.substr(0, nl);
    body.remove_prefix(nl == std::string_view::npos ? body.size() : nl + 1);
    const size_t space = line.find(' ');
    if (space == std::string_view::npos) return {};
    const auto when = format::ParseNumber(line.substr(0, space), 10, "time", kPendingPath);
    if (!when) return {};
    out.emplace(std::string(line.substr(space + 1)), *when);
  }
  return out;
}

Status WriteSightings(Storage& storage, const Sightings& sightings) {
  std::string text(kPendingHeader);
  for (const auto& [path, when] : sightings) text += fmt::format("{} {}\n", when, path);
  text += fmt::format("crc32c {:08x}\n", crc32c::Value(text.data(), text.size()));
  STOKER_RETURN_IF_ERROR(storage.CreateDirs(kGcDir));
  const std::string tmp = fmt::format("{}.{:016x}.tmp", kPendingPath, UniqueId());
  {
    STOKER_ASSIGN_OR_RETURN(auto file, storage.Create(tmp));
    STOKER_RETURN_IF_ERROR(
        file->Append({reinterpret_cast<const std::byte*>(text.data()), text.size()}));
    STOKER_RETURN_IF_ERROR(file->Sync());
    STOKER_RETURN_IF_ERROR(file->Close());
  }
  return storage.Rename(tmp, kPendingPath);
}

// Every file under `dir`, as "dir/name"; none if the directory does not exist.
Result<std::vector<std::string>> FilesIn(Storage& storage, std::string_view dir) {
  auto names = storage.List(dir);
  if (!names) {
    if (names.error().IsNotFound()) return std::vector<std::string>();
    return Err(names.error());
  }
  std::vector<std::string> out;
  for (const auto& name : *names) out.push_back(fmt::format("{}/{}", dir, name));
  return out;
}

}  // namespace

Status GcOptions::Validate() const {
  if (keep == 0) return Status::InvalidArgument("gc must keep at least the newest version");
  return Status::OK();
}

Result<GcSummary> CollectGarbage(Storage& storage, const GcOptions& options) {
  STOKER_RETURN_IF_ERROR(options.Validate());
  const uint64_t now = options.now_unix_seconds ? options.now_unix_seconds
                                                : static_cast<uint64_t>(std::time(nullptr));
  STOKER_ASSIGN_OR_RETURN(auto versions, format::ListVersions(storage));
  if (versions.empty()) {
    return Err(Status::NotFound(storage.Describe("") + " is not a stoker dataset (no versions/)"));
  }
  GcSummary summary;
  // What the kept versions use: their records, segments and chunks. Every segment of a kept
  // version is opened (and checked) once, however many versions share it.
  std::set<std::string> live;
  std::set<uint64_t> opened;
  const auto keep_version = [&](const format::VersionRecord& record) -> Status {
    live.insert(format::VersionRecordPath(record.version));
    for (const format::SegmentRef& ref : record.segments) {
      live.insert(format::SegmentPath(ref.id));
      if (!opened.insert(ref.id).second) continue;
      const std::string path = format::SegmentPath(ref.id);
      STOKER_ASSIGN_OR_RETURN(auto file, storage.OpenRead(path));
      STOKER_ASSIGN_OR_RETURN(auto segment,
                              format::Segment::Open(std::move(file), storage.Describe(path)));
      for (uint64_t c = 0; c < segment->info().chunk_count; ++c) {
        live.insert(format::ChunkPath(segment->chunk(c).id));
      }
    }
    return Status::OK();
  };
  for (size_t i = versions.size(); i-- > 0;) {
    STOKER_ASSIGN_OR_RETURN(auto record, format::ReadVersion(storage, versions[i]));
    const bool newest = versions.size() - i <= options.keep;
    const bool recent = options.keep_for &&
                        record.created_unix_seconds + options.keep_for->count() > now;
    if (!newest && !recent) {
      summary.versions_removed.push_back(record.version);
      continue;
    }
    summary.versions_kept.push_back(record.version);
    STOKER_RETURN_IF_ERROR(keep_version(record));
  }
  // Chunks of parts not yet committed (`stoker pack --part`) are a version to come.
  STOKER_ASSIGN_OR_RETURN(auto part_chunks, ChunksOfParts(storage));
  live.insert(part_chunks.begin(), part_chunks.end());
  std::sort(summary.versions_removed.begin(), summary.versions_removed.end());
  std::sort(summary.versions_kept.begin(), summary.versions_kept.end());
  // Removed versions disappear first, so no reader opens them from now on; their files follow
  // after the grace period, like any other unreferenced file.
  if (!options.dry_run) {
    for (const uint64_t v : summary.versions_removed) {
      // NotFound: another gc (or a retried request) removed it already.
      if (Status s = storage.Remove(format::VersionRecordPath(v)); !s.ok() && !s.IsNotFound()) {
        return Err(s);
      }
    }
  }

  const Sightings seen = ReadSightings(storage);
  std::vector<std::string> unreferenced;
  for (const std::string_view dir : {format::kVersionsDir, format::kSegmentsDir,
                                     std::string_view("chunks")}) {
    STOKER_ASSIGN_OR_RETURN(auto files, FilesIn(storage, dir));
    for (std::string& path : files) {
      if (live.contains(path)) continue;
      // A record of a version this run removes is gone already (or, in a dry run, reported).
      if (dir == format::kVersionsDir &&
          format::VersionOfRecordName(path.substr(dir.size() + 1)) != 0) {
        continue;
      }
      unreferenced.push_back(std::move(path));
    }
  }
  // Versions published since this run listed them (a writer that finished meanwhile) keep
  // what they name: without this, a short grace period would delete a version published
  // while gc ran. (The grace period still covers writers that have not published yet.)
  STOKER_ASSIGN_OR_RETURN(auto now_listed, format::ListVersions(storage));
  for (const uint64_t v : now_listed) {
    if (v <= versions.back()) continue;
    auto record = format::ReadVersion(storage, v);
    if (!record && record.error().IsNotFound()) continue;  // removed by another gc meanwhile
    if (!record) return Err(record.error());
    STOKER_RETURN_IF_ERROR(keep_version(*record));
  }
  Sightings pending;
  for (std::string& path : unreferenced) {
    if (live.contains(path)) continue;
    const auto it = seen.find(path);
    const uint64_t first_seen = it == seen.end() ? now : std::min(it->second, now);
    if (now - first_seen >= static_cast<uint64_t>(options.grace.count())) {
      if (!options.dry_run) {
        if (Status s = storage.Remove(path); !s.ok() && !s.IsNotFound()) return Err(s);
      }
      summary.files_removed.push_back(std::move(path));
    } else {
      pending.emplace(std::move(path), first_seen);
    }
  }
  summary.files_pending = pending.size();
  if (!options.dry_run) STOKER_RETURN_IF_ERROR(WriteSightings(storage, pending));
  return summary;
}

}  // namespace stoker::dataset
