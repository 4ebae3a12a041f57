#include "dataset/verify.h"

#include <algorithm>
#include <unordered_map>

#include <fmt/format.h>

#include "common/crc32c.h"
#include "dataset/version_view.h"
#include "format/versions.h"
#include "format/chunk.h"

namespace stoker::dataset {

namespace {

// Chunks are read in pieces of this size: a chunk of the usual size (64 MiB) in one read, a
// larger one (a file of more than 64 MiB lies in a chunk of its own) in bounded memory.
constexpr uint64_t kPieceBytes = 64ull << 20;

// A file's CRC32C over the bytes of it that have streamed past so far.
struct FileCrc {
  uint32_t crc = 0;
  uint64_t covered = 0;
};

}  // namespace

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
    // Each file's CRC is computed as the chunk streams past in pieces (files lie back to back
    // in storage order, so a cursor follows them): memory stays at one piece, whatever the
    // chunk's size.
    std::vector<FileCrc> crcs(files->size());
    size_t cursor = 0;
    const auto on_data = [&](uint64_t offset, std::span<const std::byte> bytes) {
      const uint64_t end = offset + bytes.size();
      for (size_t i = cursor; i < files->size() && (*files)[i].second.offset < end; ++i) {
        const FileLocation& r = (*files)[i].second;
        const uint64_t from = std::max(r.offset + crcs[i].covered, offset);
        const uint64_t to = std::min(r.offset + r.length, end);
        if (from < to) {
          crcs[i].crc = crc32c::Extend(crcs[i].crc, bytes.data() + (from - offset), to - from);
          crcs[i].covered += to - from;
        }
        if (r.offset + r.length <= end && i == cursor) ++cursor;
      }
    };
    auto file = storage.OpenRead(name);
    Result<format::ChunkCheck> checked = Err(file ? Status::OK() : file.error());
    if (file) checked = format::CheckChunk(**file, rec, name, kPieceBytes, on_data);
    // An unreachable store says nothing about the data: verify cannot finish (an error), which
    // must not read as corruption (exit 3) to a script.
    if (!checked && (checked.error().code() == StatusCode::kUnavailable ||
                     checked.error().code() == StatusCode::kTimeout)) {
      return Err(checked.error().WithContext("verify " + storage.Describe(name)));
    }
    ++report.chunks_checked;
    if (!checked) {
      report.corrupt_chunks.push_back(name + ": " + checked.error().message());
      fail_files("its chunk " + name + " cannot be read");
      continue;
    }
    const format::ChunkCheck& check = *checked;
    if (!check.status.ok()) report.corrupt_chunks.push_back(check.status.message());
    if ((*file)->Size() != rec.file_size) {
      // Readers refuse every file of a chunk whose size is not the metadata's.
      fail_files(fmt::format("its chunk {} has {} bytes, the metadata says {}", name,
                             (*file)->Size(), rec.file_size));
      continue;
    }
    report.bytes_checked += rec.file_size;
    // Each file: its bytes against its CRC, and its extent against the chunk's own index.
    // A multimap: an empty file shares its offset with the file after it.
    std::unordered_multimap<uint64_t, format::ChunkEntryRef> by_offset;
    for (const auto& e : check.entries) by_offset.emplace(e.offset, e);
    for (size_t i = 0; i < files->size(); ++i) {
      const auto& [f, r] = (*files)[i];
      ++report.files_checked;
      if (crcs[i].covered != r.length) {
        report.corrupt_files.push_back(fmt::format("{}: extent beyond the end of {}",
                                                   path_of(f), name));
        continue;
      }
      if (crcs[i].crc != r.crc32c) {
        report.corrupt_files.push_back(fmt::format(
            "{}: CRC32C mismatch in {} (stored {:08x}, read {:08x})", path_of(f), name,
            r.crc32c, crcs[i].crc));
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
