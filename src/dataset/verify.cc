#include "dataset/verify.h"

#include <algorithm>
#include <unordered_map>

#include <fmt/format.h>

#include "common/crc32c.h"
#include "dataset/version_view.h"
#include "format/versions.h"
#include "format/chunk.h"

namespace stoker::dataset {

Result<VerifyReport> Verify(Storage& storage, const VerifyProgress& progress,
                            std::optional<uint64_t> version) {
  VerifyReport report;
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
    return report;
  }
  if (!*latest) {
    return Err(Status::NotFound(storage.Describe("") + " is not a stoker dataset (no versions/)"));
  }
  report.version = (*latest)->version;
  // The metadata first: every block of every segment, then every file's location.
  auto opened = VersionView::Open(storage, **latest);
  Status metadata = opened ? Status::OK() : opened.error();
  for (size_t j = 0; metadata.ok() && j < (*opened)->segment_count(); ++j) {
    metadata = (*opened)->segment(j).CheckEveryBlock();
  }
  if (metadata.ok()) metadata = (*opened)->LoadSamples();
  if (!metadata.ok()) {
    if (metadata.code() == StatusCode::kUnavailable || metadata.code() == StatusCode::kTimeout) {
      return Err(metadata.WithContext("verify " + storage.Describe("")));
    }
    report.problems.push_back(metadata.message());
    return report;
  }
  const VersionView& view = **opened;
  auto path_of = [&](uint64_t f) {
    auto path = view.FilePath(f);
    return path ? *path : fmt::format("file #{} ({})", f, path.error().message());
  };

  // Chunk by chunk, with only that chunk's locations in memory, so verify's memory does not
  // grow with the dataset (one bit per file: every file must have exactly one location, which
  // blocks that each check out could still break if a broken or hostile writer made them).
  std::vector<bool> located(view.file_count());
  uint64_t located_twice = 0;
  std::vector<std::byte> buffer;
  for (uint32_t c = 0; c < view.chunk_count(); ++c) {
    const ChunkRef rec = view.chunk(c);
    const std::string name = format::ChunkPath(rec.id);
    auto files = view.ChunkFiles(c);
    if (!files) {
      report.problems.push_back(files.error().message());
      return report;
    }
    for (const auto& [f, location] : *files) {
      located_twice += located[f];
      located[f] = true;
    }
    auto fail_files = [&](const std::string& why) {
      for (const auto& [f, location] : *files) {
        report.corrupt_files.push_back(path_of(f) + ": " + why);
      }
    };
    auto file = storage.OpenRead(name);
    Status read_status = file ? Status::OK() : file.error();
    if (file) {
      buffer.resize((*file)->Size());
      read_status = (*file)->ReadAt(0, buffer);
    }
    // An unreachable store says nothing about the data: verify cannot finish (an error), which
    // must not read as corruption (exit 3) to a script.
    if (read_status.code() == StatusCode::kUnavailable || read_status.code() == StatusCode::kTimeout) {
      return Err(read_status.WithContext("verify " + storage.Describe(name)));
    }
    ++report.chunks_checked;
    if (!read_status.ok()) {
      report.corrupt_chunks.push_back(name + ": " + read_status.message());
      fail_files("its chunk " + name + " cannot be read");
      continue;
    }
    report.bytes_checked += buffer.size();
    const format::ChunkCheck check = format::CheckChunk(
        buffer, rec, name);
    if (!check.status.ok()) report.corrupt_chunks.push_back(check.status.message());
    // Each file: its bytes against its CRC, and its extent against the chunk's own index.
    // A multimap: an empty file shares its offset with the file after it.
    std::unordered_multimap<uint64_t, format::ChunkEntryRef> by_offset;
    for (const auto& e : check.entries) by_offset.emplace(e.offset, e);
    for (const auto& [f, r] : *files) {
      ++report.files_checked;
      if (r.offset + r.length > buffer.size()) {
        report.corrupt_files.push_back(fmt::format("{}: extent beyond the end of {}",
                                                   path_of(f), name));
        continue;
      }
      const uint32_t actual = crc32c::Value(buffer.data() + r.offset, r.length);
      if (actual != r.crc32c) {
        report.corrupt_files.push_back(fmt::format(
            "{}: CRC32C mismatch in {} (stored {:08x}, read {:08x})", path_of(f), name,
            r.crc32c, actual));
        continue;
      }
      const auto [first, last] = by_offset.equal_range(r.offset);
      const bool indexed = std::any_of(first, last, [&](const auto& kv) {
        return kv.second.length == r.length && kv.second.crc32c == r.crc32c;
      });
      if (!check.entries.empty() && !indexed) {
        report.corrupt_files.push_back(fmt::format(
            "{}: does not match the index of {}", path_of(f), name));
      }
    }
    if (progress) progress(c + 1, view.chunk_count(), report.bytes_checked);
  }
  const uint64_t unlocated = static_cast<uint64_t>(std::count(located.begin(), located.end(), false));
  if (located_twice > 0 || unlocated > 0) {
    report.problems.push_back(fmt::format(
        "version {}: {} files have two locations and {} none (a damaged or hostile segment)",
        report.version, located_twice, unlocated));
  }
  return report;
}

}  // namespace stoker::dataset
