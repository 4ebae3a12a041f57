#include "dataset/gc.h"

#include <algorithm>
#include <ctime>
#include <iterator>
#include <map>
#include <set>

#include <fmt/format.h>

#include "common/crc32c.h"
#include "common/unique_id.h"
#include "dataset/format1.h"
#include "dataset/parts.h"
#include "dataset/writer_lease.h"
#include "format/chunk.h"
#include "format/segment.h"
#include "format/text_fields.h"
#include "format/version_record.h"
#include "format/versions.h"
#include "storage/small_file.h"

namespace stoker::dataset {
namespace {

using format::kGcDir;
constexpr std::string_view kPendingPath = "gc/pending";
constexpr std::string_view kPendingHeader = "stoker-gc-pending 2\n";
constexpr uint64_t kMaxPendingBytes = 1ull << 30;
constexpr uint64_t kMaxLeaseBytes = 4096;

// An unreferenced file: when gc first saw it so, and the writers whose leases were live then
// (one of them may have written it and not published yet).
struct FileSighting {
  uint64_t first_seen = 0;
  std::vector<uint64_t> blockers;
};
// A writer's lease: its content's CRC and since when gc has seen that content unchanged.
struct LeaseSighting {
  uint32_t crc = 0;
  uint64_t since = 0;
};
struct Sightings {
  std::map<std::string, FileSighting> files;
  std::map<uint64_t, LeaseSighting> leases;
};

std::string JoinIds(const std::vector<uint64_t>& ids) {
  if (ids.empty()) return "-";
  std::string out;
  for (const uint64_t id : ids) out += fmt::format("{}{:016x}", out.empty() ? "" : ",", id);
  return out;
}

Result<std::vector<uint64_t>> ParseIds(std::string_view text) {
  std::vector<uint64_t> out;
  if (text == "-") return out;
  while (true) {
    const size_t comma = text.find(',');
    STOKER_ASSIGN_OR_RETURN(const uint64_t id,
                            format::ParseNumber(text.substr(0, comma), 16, "writer", kPendingPath));
    out.push_back(id);
    if (comma == std::string_view::npos) return out;
    text.remove_prefix(comma + 1);
  }
}

// Splits off the text up to the next space.
std::string_view NextField(std::string_view& line) {
  const size_t space = line.find(' ');
  const std::string_view field = line.substr(0, space);
  line.remove_prefix(space == std::string_view::npos ? line.size() : space + 1);
  return field;
}

Status ParseSightingLine(std::string_view line, Sightings& out) {
  const std::string_view kind = NextField(line);
  if (kind == "lease") {
    STOKER_ASSIGN_OR_RETURN(const uint64_t id,
                            format::ParseNumber(NextField(line), 16, "writer", kPendingPath));
    STOKER_ASSIGN_OR_RETURN(const uint64_t crc,
                            format::ParseNumber(NextField(line), 16, "crc32c", kPendingPath));
    STOKER_ASSIGN_OR_RETURN(const uint64_t since,
                            format::ParseNumber(line, 10, "time", kPendingPath));
    out.leases[id] = {static_cast<uint32_t>(crc), since};
    return Status::OK();
  }
  if (kind != "file") return Status::Corruption("unknown line in gc/pending");
  STOKER_ASSIGN_OR_RETURN(const uint64_t when,
                          format::ParseNumber(NextField(line), 10, "time", kPendingPath));
  STOKER_ASSIGN_OR_RETURN(auto blockers, ParseIds(NextField(line)));
  std::sort(blockers.begin(), blockers.end());  // as written; intersected with sorted lists
  out.files[std::string(line)] = {when, std::move(blockers)};  // the path: the rest of the line
  return Status::OK();
}

// gc/pending (docs/format.md §6): a header, "lease" and "file" lines, and "crc32c <hex>" of all
// the bytes before that line. A damaged or missing file (or one of format 1) reads as empty:
// that only postpones deletions, never hastens one.
Sightings ReadSightings(Storage& storage) {
  auto text = storage::ReadSmallFile(storage, kPendingPath, kMaxPendingBytes);
  if (!text || !text->starts_with(kPendingHeader)) return {};
  const size_t crc_line = text->rfind("crc32c ");
  if (crc_line == std::string::npos || text->back() != '\n') return {};
  const auto crc =
      format::ParseNumber(std::string_view(*text).substr(crc_line + 7, text->size() - crc_line - 8),
                          16, "crc32c", kPendingPath);
  if (!crc || *crc != crc32c::Value(text->data(), crc_line)) return {};
  std::string_view body =
      std::string_view(*text).substr(kPendingHeader.size(), crc_line - kPendingHeader.size());
  Sightings out;
  while (!body.empty()) {
    const size_t nl = body.find('\n');
    if (!ParseSightingLine(body.substr(0, nl), out).ok()) return {};
    body.remove_prefix(nl == std::string_view::npos ? body.size() : nl + 1);
  }
  return out;
}

Status WriteSightings(Storage& storage, const Sightings& sightings) {
  std::string text(kPendingHeader);
  for (const auto& [id, lease] : sightings.leases) {
    text += fmt::format("lease {:016x} {:08x} {}\n", id, lease.crc, lease.since);
  }
  for (const auto& [path, file] : sightings.files) {
    text += fmt::format("file {} {} {}\n", file.first_seen, JoinIds(file.blockers), path);
  }
  text += fmt::format("crc32c {:08x}\n", crc32c::Value(text.data(), text.size()));
  STOKER_RETURN_IF_ERROR(storage.CreateDirs(kGcDir));
  const std::string tmp = fmt::format("{}.{:016x}.tmp", kPendingPath, UniqueId());
  STOKER_RETURN_IF_ERROR(storage::WriteSmallFile(storage, tmp, text));
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

// The writers at work: the leases under gc/writers/ whose content gc has not seen unchanged
// for the writer timeout (`seen`: what earlier runs noted). Leases that have (their writer
// died or froze) are removed, unless this is a dry run, and reported in `summary`.
Result<std::map<uint64_t, LeaseSighting>> LiveWriters(Storage& storage, const GcOptions& options,
                                                      uint64_t now,
                                                      const std::map<uint64_t, LeaseSighting>& seen,
                                                      GcSummary& summary) {
  std::map<uint64_t, LeaseSighting> live;
  auto names = storage.List(kWritersDir);
  if (!names && !names.error().IsNotFound()) return Err(names.error());
  for (const std::string& name : names ? *names : std::vector<std::string>()) {
    const auto writer = WriterOfLeaseName(name);
    if (!writer) continue;
    auto text = storage::ReadSmallFile(storage, LeasePath(*writer), kMaxLeaseBytes);
    if (!text && text.error().IsNotFound()) continue;  // the writer finished meanwhile
    // A lease whose process is gone from this machine needs no timeout to be judged.
    if (text) {
      const auto holder = ParseLeaseHolder(
          std::string_view(reinterpret_cast<const char*>(text->data()), text->size()));
      if (holder && HolderIsGone(*holder)) {
        summary.writers_gone.emplace_back(
            *writer, fmt::format("pid {} on {}, gone", holder->pid, holder->host));
        if (!options.dry_run) {
          if (Status s = storage.Remove(LeasePath(*writer)); !s.ok() && !s.IsNotFound()) {
            return Err(s);
          }
        }
        continue;
      }
    }
    // An unreadable lease ages like an unchanged one.
    const uint32_t crc = text ? crc32c::Value(text->data(), text->size()) : 0;
    const auto before = seen.find(*writer);
    const uint64_t since = before != seen.end() && before->second.crc == crc
                               ? std::min(before->second.since, now)
                               : now;
    if (now - since < static_cast<uint64_t>(options.writer_timeout.count())) {
      live[*writer] = {crc, since};
      continue;
    }
    summary.writers_expired.push_back(*writer);
    if (!options.dry_run) {
      if (Status s = storage.Remove(LeasePath(*writer)); !s.ok() && !s.IsNotFound()) {
        return Err(s);
      }
    }
  }
  return live;
}

}  // namespace

Status GcOptions::Validate() const {
  if (keep == 0) return Status::InvalidArgument("gc must keep at least the newest version");
  return Status::OK();
}

namespace {

// A directory with none of a dataset's directories is not one (a typo in the path): refused
// rather than reported clean.
Status CheckLooksLikeDataset(Storage& storage) {
  auto names = storage.List("");
  if (names) {
    for (const std::string& name : *names) {
      // gc/: leases and gc's notes (kWritersDir, kPendingPath).
      if (name == kChunksDir || name == format::kSegmentsDir || name == "gc" || name == kPartsDir) {
        return Status::OK();
      }
    }
  }
  return Status::NotFound(storage.Describe("") + " is not a stoker dataset (no versions/)");
}

// What the kept versions use: their records, segments and chunks. Every segment of a kept
// version is opened (and checked) once, however many versions share it.
class LiveFiles {
 public:
  explicit LiveFiles(Storage& storage) : storage_(storage) {}

  Status KeepVersion(const format::VersionRecord& record) {
    paths_.insert(format::VersionRecordPath(record.version));
    for (const format::SegmentRef& ref : record.segments) {
      paths_.insert(format::SegmentPath(ref.id));
      if (!opened_.insert(ref.id).second) continue;
      const std::string path = format::SegmentPath(ref.id);
      STOKER_ASSIGN_OR_RETURN(auto file, storage_.OpenRead(path));
      STOKER_ASSIGN_OR_RETURN(auto segment,
                              format::Segment::Open(std::move(file), storage_.Describe(path)));
      for (uint64_t c = 0; c < segment->info().chunk_count; ++c) {
        STOKER_ASSIGN_OR_RETURN(const format::SegmentChunk chunk, segment->chunk(c));
        paths_.insert(format::ChunkPath(chunk.id));
      }
    }
    return Status::OK();
  }
  void Keep(const std::set<std::string>& paths) { paths_.insert(paths.begin(), paths.end()); }
  bool contains(const std::string& path) const { return paths_.contains(path); }

 private:
  Storage& storage_;
  std::set<std::string> paths_;
  std::set<uint64_t> opened_;
};

// Step 1: which versions stay (the newest `keep`, those younger than `keep_for`), with what
// they use; then what uncommitted parts hold. Removed versions are listed in `summary`.
Status MarkKeptVersions(Storage& storage, const GcOptions& options, uint64_t now,
                        const std::vector<uint64_t>& versions, LiveFiles& live,
                        GcSummary& summary) {
  for (size_t i = versions.size(); i-- > 0;) {
    STOKER_ASSIGN_OR_RETURN(auto record, format::ReadVersion(storage, versions[i]));
    const bool newest = versions.size() - i <= options.keep;
    const bool recent =
        options.keep_for && record.created_unix_seconds + options.keep_for->count() > now;
    if (!newest && !recent) {
      summary.versions_removed.push_back(record.version);
      continue;
    }
    summary.versions_kept.push_back(record.version);
    STOKER_RETURN_IF_ERROR(live.KeepVersion(record));
  }
  // Chunks of parts not yet committed (`stoker pack --part`) are a version to come.
  STOKER_ASSIGN_OR_RETURN(UncommittedParts open, ListUncommittedParts(storage));
  live.Keep(open.chunks);
  summary.open_jobs = std::move(open.jobs);
  std::sort(summary.versions_removed.begin(), summary.versions_removed.end());
  std::sort(summary.versions_kept.begin(), summary.versions_kept.end());
  return Status::OK();
}

// Step 2: every file of versions/, segments/ and chunks/ that nothing kept uses (records of the
// versions this run removes excepted: they are gone already, or reported in a dry run).
Result<std::vector<std::string>> UnreferencedFiles(Storage& storage, const LiveFiles& live) {
  std::vector<std::string> unreferenced;
  for (const std::string_view dir :
       {format::kVersionsDir, format::kSegmentsDir, std::string_view("chunks")}) {
    STOKER_ASSIGN_OR_RETURN(auto files, FilesIn(storage, dir));
    for (std::string& path : files) {
      if (live.contains(path) || path == format::kLatestHintPath) continue;
      if (dir == format::kVersionsDir &&
          format::VersionOfRecordName(path.substr(dir.size() + 1)) != 0) {
        continue;
      }
      unreferenced.push_back(std::move(path));
    }
  }
  // A closed job's parts will never be published; its marker refuses the job's attempts that
  // outlive it, which are writers at work: they go as those writers' files would.
  STOKER_ASSIGN_OR_RETURN(auto closed, FilesOfClosedJobs(storage));
  for (std::string& path : closed) unreferenced.push_back(std::move(path));
  return unreferenced;
}

// Step 4: an unreferenced file goes once the grace period has passed since gc first saw it and
// none of the writers at work then is still at work; else it waits in `pending`.
// `never_published`: no version was ever removed, so no unreferenced file was ever published
// and none needs the grace period.
Status SweepOrHold(Storage& storage, const GcOptions& options, uint64_t now,
                   std::vector<std::string>& unreferenced, const LiveFiles& live,
                   const Sightings& seen, const std::vector<uint64_t>& writers, Sightings& pending,
                   bool never_published, GcSummary& summary) {
  for (std::string& path : unreferenced) {
    if (live.contains(path)) continue;
    const auto it = seen.files.find(path);
    FileSighting sighting{now, writers};
    if (it != seen.files.end()) {
      // Only the writers that were at work when gc first saw the file can have written it.
      sighting.first_seen = std::min(it->second.first_seen, now);
      sighting.blockers.clear();
      std::set_intersection(it->second.blockers.begin(), it->second.blockers.end(), writers.begin(),
                            writers.end(), std::back_inserter(sighting.blockers));
    }
    const bool graced = now - sighting.first_seen >= static_cast<uint64_t>(options.grace.count());
    if ((graced || never_published) && sighting.blockers.empty()) {
      if (!options.dry_run) {
        if (Status s = storage.Remove(path); !s.ok() && !s.IsNotFound()) return s;
      }
      summary.files_never_published += !graced;
      summary.files_removed.push_back(std::move(path));
    } else {
      summary.files_held_for_writers += !sighting.blockers.empty();
      pending.files.emplace(std::move(path), std::move(sighting));
    }
  }
  summary.files_pending = pending.files.size();
  return Status::OK();
}

}  // namespace

Result<GcSummary> CollectGarbage(Storage& storage, const GcOptions& options) {
  STOKER_RETURN_IF_ERROR(options.Validate());
  const uint64_t now = options.now_unix_seconds ? options.now_unix_seconds
                                                : static_cast<uint64_t>(std::time(nullptr));
  STOKER_ASSIGN_OR_RETURN(auto versions, format::ListVersions(storage));
  // A directory whose first pack never published (Ctrl-C, a crash) has chunks and leases but no
  // version: cleaned like any other.
  if (versions.empty()) STOKER_RETURN_IF_ERROR(CheckLooksLikeDataset(storage));
  GcSummary summary;
  LiveFiles live(storage);
  STOKER_RETURN_IF_ERROR(MarkKeptVersions(storage, options, now, versions, live, summary));
  // Removed versions disappear first, so no reader opens them from now on; their files follow
  // after the grace period, like any other unreferenced file.
  if (!options.dry_run) {
    // Readers that cannot list probe from the hint: it must not name a version removed here.
    if (!summary.versions_removed.empty()) {
      STOKER_RETURN_IF_ERROR(format::WriteLatestHint(storage, versions.back()));
    }
    for (const uint64_t v : summary.versions_removed) {
      // NotFound: another gc (or a retried request) removed it already.
      if (Status s = storage.Remove(format::VersionRecordPath(v)); !s.ok() && !s.IsNotFound()) {
        return Err(s);
      }
    }
    // Durably gone before any file they name goes: without this sync a power loss could bring
    // back a record whose segment's removal did reach the disk (tests: dataset/power_loss_test).
    if (!summary.versions_removed.empty()) {
      STOKER_RETURN_IF_ERROR(storage.SyncDir(format::kVersionsDir));
    }
  }
  const Sightings seen = ReadSightings(storage);
  STOKER_ASSIGN_OR_RETURN(auto unreferenced, UnreferencedFiles(storage, live));
  // Step 3: the writers at work, listed after the files: a writer creates its lease before any
  // file, so a file listed above whose writer has not published yet is covered by a lease
  // listed here (or the writer has finished: versions published since this run listed them
  // keep what they name).
  Sightings pending;
  STOKER_ASSIGN_OR_RETURN(pending.leases, LiveWriters(storage, options, now, seen.leases, summary));
  std::vector<uint64_t> writers;  // sorted, as the map is
  writers.reserve(pending.leases.size());
  for (const auto& [writer, lease] : pending.leases) writers.push_back(writer);
  summary.writers_active = writers.size();
  STOKER_ASSIGN_OR_RETURN(auto now_listed, format::ListVersions(storage));
  for (const uint64_t v : now_listed) {
    if (!versions.empty() && v <= versions.back()) continue;
    auto record = format::ReadVersion(storage, v);
    if (!record && record.error().IsNotFound()) continue;  // removed by another gc meanwhile
    if (!record) return Err(record.error());
    STOKER_RETURN_IF_ERROR(live.KeepVersion(*record));
  }
  // gc removes versions oldest first, so while the first one's record is there, none was
  // removed (a dataset upgraded from format 1 starts later: it keeps the grace period).
  const bool never_published =
      summary.versions_removed.empty() && (versions.empty() || versions.front() == 1);
  STOKER_RETURN_IF_ERROR(SweepOrHold(storage, options, now, unreferenced, live, seen, writers,
                                     pending, never_published, summary));
  if (!options.dry_run) STOKER_RETURN_IF_ERROR(WriteSightings(storage, pending));
  return summary;
}

}  // namespace stoker::dataset
