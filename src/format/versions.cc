#include "format/versions.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/parse_number.h"
#include "common/unique_id.h"
#include "storage/small_file.h"

namespace stoker::format {
namespace {

std::span<const std::byte> AsBytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

constexpr uint64_t kMaxHintBytes = 64;

// The version `versions/latest` names; 0 without one (or with one that is not "<number>\n").
Result<uint64_t> ReadLatestHint(Storage& storage) {
  auto text = storage::ReadSmallFile(storage, kLatestHintPath, kMaxHintBytes);
  if (!text) {
    if (text.error().IsNotFound() || text.error().IsCorruption()) return 0;
    return Err(text.error());
  }
  if (!text->ends_with('\n')) return 0;
  return ParseUnsigned<uint64_t>(std::string_view(*text).substr(0, text->size() - 1)).value_or(0);
}

Result<bool> RecordExists(Storage& storage, uint64_t version) {
  return storage.Exists(VersionRecordPath(version));
}

// The far end of the run of records through `known` (which exists), going up or down: steps of
// 1, 2, 4, ... from `known` until a record is missing, then bisecting between the last step
// found and the first missing. Version 0 never exists.
Result<uint64_t> EndOfRun(Storage& storage, uint64_t known, bool up) {
  const uint64_t room = up ? UINT64_MAX - known : known - 1;  // versions beyond `known`
  const auto at = [&](uint64_t distance) { return up ? known + distance : known - distance; };
  uint64_t in = 0, out = 0;  // distances from `known` to a record that exists, one that does not
  for (uint64_t step = 1; out == 0; step *= 2) {
    if (step == 0 || step > room) {
      if (up) {
        return Err(Status::Corruption(
            fmt::format("{}: version records up to {} exist", storage.Describe(""), at(in))));
      }
      out = room + 1;  // version 0
      break;
    }
    STOKER_ASSIGN_OR_RETURN(const bool exists, RecordExists(storage, at(step)));
    (exists ? in : out) = step;
  }
  while (out - in > 1) {
    const uint64_t mid = in + (out - in) / 2;
    STOKER_ASSIGN_OR_RETURN(const bool exists, RecordExists(storage, at(mid)));
    (exists ? in : out) = mid;
  }
  return at(in);
}

// The newest version of storage that cannot list (see the header); 0 if it holds none.
Result<uint64_t> ProbeNewestVersion(Storage& storage) {
  STOKER_ASSIGN_OR_RETURN(const uint64_t hint, ReadLatestHint(storage));
  for (const uint64_t start : {hint, uint64_t{1}}) {
    if (start == 0) continue;
    STOKER_ASSIGN_OR_RETURN(const bool exists, RecordExists(storage, start));
    if (exists) return EndOfRun(storage, start, /*up=*/true);
  }
  if (hint == 0) {
    STOKER_ASSIGN_OR_RETURN(const bool hinted, storage.Exists(kLatestHintPath));
    if (!hinted) return 0;  // nothing published, or not a dataset at all
  }
  const std::string hinted =
      hint == 0 ? "holds no version number" : fmt::format("names version {}, which is gone", hint);
  return Err(Status::NotFound(fmt::format(
      "{}: {} {}, and version 1 is gone too; without a listing (or a hint written by `stoker "
      "gc`) the newest version cannot be found: open a version by number",
      storage.Describe(""), kLatestHintPath, hinted)));
}

// ListVersions without a listing: the run that ends at the newest version, its start found by
// probing down from there.
Result<std::vector<uint64_t>> ProbeVersions(Storage& storage) {
  STOKER_ASSIGN_OR_RETURN(const uint64_t newest, ProbeNewestVersion(storage));
  if (newest == 0) return std::vector<uint64_t>();
  STOKER_ASSIGN_OR_RETURN(const uint64_t oldest, EndOfRun(storage, newest, /*up=*/false));
  std::vector<uint64_t> versions;
  for (uint64_t v = oldest; v <= newest; ++v) versions.push_back(v);
  return versions;
}

// The versions that a listing of versions/ names; nullopt where the storage cannot list.
Result<std::optional<std::vector<uint64_t>>> ListedVersions(Storage& storage) {
  auto names = storage.List(kVersionsDir);
  if (!names) {
    if (names.error().IsNotFound()) return std::optional(std::vector<uint64_t>());
    if (names.error().IsUnsupported()) {
      return std::optional<std::vector<uint64_t>>();
    }
    return Err(names.error().WithContext("listing " + storage.Describe(kVersionsDir)));
  }
  std::vector<uint64_t> versions;
  for (const std::string& name : *names) {
    if (const uint64_t v = VersionOfRecordName(name); v > 0) versions.push_back(v);
  }
  std::sort(versions.begin(), versions.end());
  return std::optional(std::move(versions));
}

}  // namespace

Status WriteLatestHint(Storage& storage, uint64_t version) {
  const std::string aside = fmt::format("{}.{:016x}.tmp", kLatestHintPath, UniqueId());
  Status s = storage::WriteSmallFile(storage, aside, fmt::format("{}\n", version));
  if (s.ok()) s = storage.Rename(aside, kLatestHintPath);
  if (!s.ok()) {
    (void)storage.Remove(aside);  // gc sweeps it otherwise
    return s.WithContext("writing " + storage.Describe(kLatestHintPath));
  }
  return Status::OK();
}

Result<std::vector<uint64_t>> ListVersions(Storage& storage) {
  STOKER_ASSIGN_OR_RETURN(auto listed, ListedVersions(storage));
  if (!listed) return ProbeVersions(storage);
  return std::move(*listed);
}

Result<VersionRecord> ReadVersion(Storage& storage, uint64_t version) {
  const std::string path = VersionRecordPath(version);
  auto text = storage::ReadSmallFile(storage, path, kMaxVersionRecordSize);
  if (!text) {
    if (text.error().IsNotFound()) {
      return Err(
          Status::NotFound(fmt::format("{} has no version {}", storage.Describe(""), version)));
    }
    return Err(text.error());
  }
  auto record = ParseVersionRecord(*text);
  if (!record) return Err(record.error().WithContext(storage.Describe(path)));
  if (record->version != version) {
    return Err(Status::Corruption(
        fmt::format("{}: holds version {}", storage.Describe(path), record->version)));
  }
  return record;
}

Result<std::optional<VersionRecord>> ReadLatestVersion(Storage& storage) {
  uint64_t newest = 0;
  STOKER_ASSIGN_OR_RETURN(auto listed, ListedVersions(storage));
  if (!listed) {
    STOKER_ASSIGN_OR_RETURN(newest, ProbeNewestVersion(storage));
  } else if (!listed->empty()) {
    newest = listed->back();
  }
  if (newest == 0) return std::optional<VersionRecord>();
  STOKER_ASSIGN_OR_RETURN(auto record, ReadVersion(storage, newest));
  return std::optional<VersionRecord>(std::move(record));
}

Result<WrittenSegment> WriteSegment(Storage& storage,
                                    const std::function<Status(SegmentSink&)>& write) {
  WrittenSegment w;
  w.id = UniqueId();
  w.path = SegmentPath(w.id);
  STOKER_RETURN_IF_ERROR(storage.CreateDirs(kSegmentsDir));
  // Segment names are random, so no other writer ever creates this one: it is streamed out
  // (a segment of a billion files need not fit in memory) and is garbage until a version
  // record names it.
  const auto written = [&]() -> Status {
    STOKER_ASSIGN_OR_RETURN(auto file, storage.Create(w.path));
    WritableFileSink sink(*file);
    STOKER_RETURN_IF_ERROR(write(sink));
    STOKER_RETURN_IF_ERROR(sink.Flush());
    STOKER_RETURN_IF_ERROR(file->Sync());
    STOKER_RETURN_IF_ERROR(file->Close());
    w.bytes = sink.size();
    return storage.SyncDir(kSegmentsDir);
  }();
  if (!written.ok()) {
    (void)storage.Remove(w.path);
    return Err(written);
  }
  STOKER_ASSIGN_OR_RETURN(auto file, storage.OpenRead(w.path));
  auto segment = Segment::Open(std::move(file), storage.Describe(w.path));
  if (!segment) {
    (void)storage.Remove(w.path);
    return Err(Status::Internal("a segment was written that its reader rejects: " +
                                segment.error().ToString()));
  }
  w.segment = std::move(*segment);
  return w;
}

SegmentRef RefOf(const WrittenSegment& written) {
  const SegmentInfo& info = written.segment->info();
  return {written.id,      written.bytes,     written.segment->footer_crc32c(),
          info.file_count, info.sample_count, info.class_count,
          info.chunk_count};
}

void AppendSegment(VersionRecord& record, const WrittenSegment& written) {
  const SegmentInfo& info = written.segment->info();
  record.files += info.file_count;
  record.samples += info.sample_count;
  record.classes += info.class_count;
  record.chunks += info.chunk_count;
  record.bytes += info.total_bytes;
  record.segments.push_back(RefOf(written));
}

Status CreateExclusiveOrConfirm(Storage& storage, std::string_view path, std::string_view bytes,
                                uint64_t limit) {
  Status created = storage.CreateExclusive(path, AsBytes(bytes));
  if (created.ok()) return created;
  // AlreadyExists, or an error that may have come after the file was created (a lost reply;
  // an S3 client's retry meeting its own first attempt): the stored bytes decide.
  auto stored = storage::ReadSmallFile(storage, path, limit);
  if (stored && *stored == bytes) return Status::OK();
  if (stored) {
    return Status::AlreadyExists(storage.Describe(path) + " was created by another writer");
  }
  // Not there: nothing was published (the create's own error stands). Unreadable: whether this
  // writer created it is unknown, so it must not be taken for another writer's (the caller
  // would remove files that a published version may list).
  if (stored.error().IsNotFound()) return created;
  return stored.error().WithContext(fmt::format("cannot tell whether {} was created ({})",
                                                storage.Describe(path), created.ToString()));
}

Status PublishVersionRecord(Storage& storage, const VersionRecord& record) {
  STOKER_RETURN_IF_ERROR(storage.CreateDirs(kVersionsDir));
  Status s = CreateExclusiveOrConfirm(storage, VersionRecordPath(record.version),
                                      EncodeVersionRecord(record), kMaxVersionRecordSize);
  if (s.IsAlreadyExists()) {
    return Status::AlreadyExists(fmt::format("version {} of {} was published by another writer",
                                             record.version, storage.Describe("")));
  }
  return s;
}

}  // namespace stoker::format
