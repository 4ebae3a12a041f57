#include "format/versions.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/unique_id.h"
#include "storage/small_file.h"

namespace stoker::format {
namespace {

std::span<const std::byte> AsBytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

}  // namespace

Result<std::vector<uint64_t>> ListVersions(Storage& storage) {
  auto names = storage.List(kVersionsDir);
  if (!names) {
    if (names.error().IsNotFound()) return std::vector<uint64_t>();
    return Err(names.error().WithContext("listing " + storage.Describe(kVersionsDir)));
  }
  std::vector<uint64_t> versions;
  for (const std::string& name : *names) {
    if (const uint64_t v = VersionOfRecordName(name); v > 0) versions.push_back(v);
  }
  std::sort(versions.begin(), versions.end());
  return versions;
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
  STOKER_ASSIGN_OR_RETURN(auto versions, ListVersions(storage));
  if (versions.empty()) return std::optional<VersionRecord>();
  STOKER_ASSIGN_OR_RETURN(auto record, ReadVersion(storage, versions.back()));
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
  if (s.code() == StatusCode::kAlreadyExists) {
    return Status::AlreadyExists(fmt::format("version {} of {} was published by another writer",
                                             record.version, storage.Describe("")));
  }
  return s;
}

}  // namespace stoker::format
