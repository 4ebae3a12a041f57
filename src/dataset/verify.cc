#include "dataset/verify.h"

#include <algorithm>
#include <unordered_map>

#include <fmt/format.h>

#include "common/crc32c.h"
#include "dataset/version_view.h"
#include "format/chunk.h"
#include "format/versions.h"

namespace stoker::dataset {

namespace {

// Chunks are read in pieces of this size: a chunk of the usual size (64 MiB) in one read, a
// larger one (a file of more than 64 MiB lies in a chunk of its own) in bounded memory.
constexpr uint64_t kPieceBytes = 64ull << 20;

using ChunkFiles = std::vector<std::pair<uint64_t, FileLocation>>;

// Errors that say nothing about the data: the store cannot be reached, will not let us read (a
// permission problem is the operator's to fix, not corruption: exit 1, not 3), or cannot serve
// reads as stoker makes them (a web server that ignores byte ranges).
bool Unreachable(const Status& s) {
  return s.IsUnavailable() || s.IsTimeout() || s.IsPermissionDenied() || s.IsUnsupported();
}

// The version to check, with every metadata block checked; nullptr, with the problem in the
// report, when its record or metadata is damaged. An error when the store cannot be reached
// (that says nothing about the data) or the version does not exist.
Result<std::unique_ptr<VersionView>> OpenChecked(Storage& storage, std::optional<uint64_t> version,
                                                 VerifyReport& report) {
  Result<std::optional<format::VersionRecord>> latest = Err(Status::Internal("unset"));
  if (version) {
    auto record = format::ReadVersion(storage, *version);
    if (!record && record.error().IsNotFound()) return Err(record.error());
    latest = record ? Result<std::optional<format::VersionRecord>>(std::move(*record))
                    : Result<std::optional<format::VersionRecord>>(Err(record.error()));
  } else {
    latest = format::ReadLatestVersion(storage);
  }
  if (!latest) {
    if (!latest.error().IsCorruption()) return Err(latest.error());
    // The report names the version that does not read: the one asked for, or the newest.
    if (version) {
      report.version = *version;
    } else if (auto listed = format::ListVersions(storage); listed && !listed->empty()) {
      report.version = listed->back();
    }
    report.problems.push_back(latest.error().message());
    return std::unique_ptr<VersionView>();
  }
  const std::optional<format::VersionRecord>& record = *latest;
  if (!record) {
    return Err(Status::NotFound(storage.Describe("") + " is not a stoker dataset (no versions/)"));
  }
  report.version = record->version;
  // Every block of every segment, and the samples.
  auto opened = VersionView::Open(storage, *record);
  Status metadata = opened ? Status::OK() : opened.error();
  for (size_t j = 0; metadata.ok() && j < (*opened)->segment_count(); ++j) {
    metadata = (*opened)->segment(j).CheckEveryBlock();
  }
  if (metadata.ok()) metadata = (*opened)->LoadSamples();
  if (metadata.ok()) return std::move(*opened);
  if (Unreachable(metadata)) return Err(metadata.WithContext("verify " + storage.Describe("")));
  report.problems.push_back(metadata.message());
  return std::unique_ptr<VersionView>();
}

std::string PathOf(const VersionView& view, uint64_t file) {
  auto path = view.FilePath(file);
  return path ? *path : fmt::format("file #{} ({})", file, path.error().message());
}

// The CRC32C of each of a chunk's files as the chunk streams past in pieces. Files lie back to
// back in storage order (ChunkFiles' order), so a cursor follows them: each piece touches only
// the files it overlaps.
class ChunkFileCrcs {
 public:
  explicit ChunkFileCrcs(const ChunkFiles& files) {
    crcs_.reserve(files.size());
    for (const auto& [f, r] : files) crcs_.push_back({r.offset, r.offset + r.length});
  }
  void Add(uint64_t offset, std::span<const std::byte> bytes) {
    const uint64_t end = offset + bytes.size();
    for (size_t i = cursor_; i < crcs_.size() && crcs_[i].begin < end; ++i) {
      crcs_[i].Add(offset, bytes);
    }
    while (cursor_ < crcs_.size() && crcs_[cursor_].end <= end) ++cursor_;
  }
  const format::ExtentCrc& operator[](size_t i) const { return crcs_[i]; }

 private:
  std::vector<format::ExtentCrc> crcs_;
  size_t cursor_ = 0;
};

// A chunk check's message without the chunk's name in front ("chunk NAME: " or "NAME: "): the
// finding names it.
std::string WithoutChunkName(std::string_view message, const std::string& name) {
  for (const std::string& prefix : {"chunk " + name + ": ", name + ": "}) {
    if (message.starts_with(prefix)) return std::string(message.substr(prefix.size()));
  }
  return std::string(message);
}

// Checks chunk `c` and each of its `files`: its bytes against its CRC, and its extent against
// the chunk's own index. What is wrong goes into the report; an error only when the store
// cannot be reached.
Status VerifyChunk(Storage& storage, const VersionView& view, uint32_t c, const ChunkFiles& files,
                   VerifyReport& report) {
  STOKER_ASSIGN_OR_RETURN(const ChunkRef rec, view.chunk(c));
  const std::string name = format::ChunkPath(rec.id);
  const auto fail_files = [&](const std::string& why) {
    for (const auto& [f, r] : files) report.corrupt_files.push_back({PathOf(view, f), why});
  };
  ChunkFileCrcs crcs(files);
  auto file = storage.OpenRead(name);
  Result<format::ChunkCheck> checked = Err(file ? Status::OK() : file.error());
  if (file) {
    checked = format::CheckChunk(
        **file, rec, name, kPieceBytes,
        [&](uint64_t offset, std::span<const std::byte> bytes) { crcs.Add(offset, bytes); });
  }
  if (!checked && Unreachable(checked.error())) {
    return checked.error().WithContext("verify " + storage.Describe(name));
  }
  ++report.chunks_checked;
  if (!checked) {
    report.corrupt_chunks.push_back({name, WithoutChunkName(checked.error().message(), name)});
    fail_files("its chunk " + name + " cannot be read");
    return Status::OK();
  }
  const format::ChunkCheck& check = *checked;
  if (!check.status.ok()) {
    report.corrupt_chunks.push_back({name, WithoutChunkName(check.status.message(), name)});
  }
  if ((*file)->Size() != rec.file_size) {
    // Readers refuse every file of a chunk whose size is not the metadata's.
    fail_files(fmt::format("its chunk {} has {} bytes, the metadata says {}", name, (*file)->Size(),
                           rec.file_size));
    return Status::OK();
  }
  report.bytes_checked += rec.file_size;
  // A multimap: an empty file shares its offset with the file after it.
  std::unordered_multimap<uint64_t, format::ChunkEntryRef> by_offset;
  for (const auto& e : check.entries) by_offset.emplace(e.offset, e);
  for (size_t i = 0; i < files.size(); ++i) {
    const auto& [f, r] = files[i];
    ++report.files_checked;
    if (!crcs[i].complete()) {
      report.corrupt_files.push_back(
          {PathOf(view, f), fmt::format("extent beyond the end of {}", name)});
      continue;
    }
    if (crcs[i].crc != r.crc32c) {
      report.corrupt_files.push_back(
          {PathOf(view, f),
           format::PayloadMismatch(r.crc32c, crcs[i].crc, storage.Describe(name))});
      continue;
    }
    const auto [first, last] = by_offset.equal_range(r.offset);
    const bool indexed = std::any_of(first, last, [&](const auto& kv) {
      return kv.second.length == r.length && kv.second.crc32c == r.crc32c;
    });
    if (!check.entries.empty() && !indexed) {
      report.corrupt_files.push_back(
          {PathOf(view, f), fmt::format("does not match the index of {}", name)});
    }
  }
  return Status::OK();
}

}  // namespace

Result<VerifyReport> Verify(Storage& storage, const VerifyProgress& progress,
                            std::optional<uint64_t> version) {
  VerifyReport report;
  STOKER_ASSIGN_OR_RETURN(const auto opened, OpenChecked(storage, version, report));
  if (!opened) return report;
  const VersionView& view = *opened;
  // Chunk by chunk, with only that chunk's locations in memory, so verify's memory does not
  // grow with the dataset (one bit per file: every file must have exactly one location, which
  // blocks that each check out could still break if a broken or hostile writer made them).
  std::vector<bool> located(view.file_count());
  uint64_t located_twice = 0;
  for (uint32_t c = 0; c < view.chunk_count(); ++c) {
    auto files = view.ChunkFiles(c);
    if (!files) {
      report.problems.push_back(files.error().message());
      return report;
    }
    for (const auto& [f, location] : *files) {
      located_twice += located[f];
      located[f] = true;
    }
    STOKER_RETURN_IF_ERROR(VerifyChunk(storage, view, c, *files, report));
    if (progress) progress(c + 1, view.chunk_count(), report.bytes_checked);
  }
  const auto unlocated = static_cast<uint64_t>(std::count(located.begin(), located.end(), false));
  if (located_twice > 0 || unlocated > 0) {
    report.problems.push_back(fmt::format(
        "version {}: {} files have two locations and {} none (a damaged or hostile segment)",
        report.version, located_twice, unlocated));
  }
  return report;
}

}  // namespace stoker::dataset
