#include "dataset/verify.h"

#include <algorithm>
#include <unordered_map>

#include <fmt/format.h>

#include "common/crc32c.h"
#include "dataset/publish.h"
#include "format/chunk.h"

namespace stoker::dataset {

Result<VerifyReport> Verify(Storage& storage, const VerifyProgress& progress) {
  VerifyReport report;
  auto manifest = ReadCurrentVersion(storage);
  if (!manifest) {
    if (!manifest.error().IsCorruption()) return Err(manifest.error());
    report.problems.push_back(manifest.error().message());
    return report;
  }
  if (!*manifest) {
    return Err(Status::NotFound(storage.Describe("") + " is not a stoker dataset (no MANIFEST)"));
  }
  report.version = (*manifest)->version;
  auto snapshot = OpenSnapshot(storage, **manifest, /*verify_checksum=*/true);
  if (!snapshot) {
    report.problems.push_back(snapshot.error().message());
    return report;
  }
  const auto& snap = **snapshot;

  std::vector<std::vector<uint32_t>> files_of(snap.chunk_count());
  for (uint32_t f = 0; f < snap.file_count(); ++f) files_of[snap.file(f).chunk].push_back(f);

  std::vector<std::byte> buffer;
  for (uint32_t c = 0; c < snap.chunk_count(); ++c) {
    const format::ChunkRecord rec = snap.chunk(c);
    const std::string name = format::ChunkPath(rec.id);
    auto fail_files = [&](const std::string& why) {
      for (uint32_t f : files_of[c]) report.corrupt_files.push_back(snap.FilePath(f) + ": " + why);
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
        buffer, {rec.id, rec.file_size, rec.data_crc32c, rec.entry_count}, name);
    if (!check.status.ok()) report.corrupt_chunks.push_back(check.status.message());
    // Each file: its bytes against its CRC, and its extent against the chunk's own index.
    // A multimap: an empty file shares its offset with the file after it.
    std::unordered_multimap<uint64_t, format::ChunkEntryRef> by_offset;
    for (const auto& e : check.entries) by_offset.emplace(e.offset, e);
    for (uint32_t f : files_of[c]) {
      ++report.files_checked;
      const format::FileRecord r = snap.file(f);
      if (r.offset + r.length > buffer.size()) {
        report.corrupt_files.push_back(fmt::format("{}: extent beyond the end of {}",
                                                   snap.FilePath(f), name));
        continue;
      }
      const uint32_t actual = crc32c::Value(buffer.data() + r.offset, r.length);
      if (actual != r.crc32c) {
        report.corrupt_files.push_back(fmt::format(
            "{}: CRC32C mismatch in {} (stored {:08x}, read {:08x})", snap.FilePath(f), name,
            r.crc32c, actual));
        continue;
      }
      const auto [first, last] = by_offset.equal_range(r.offset);
      const bool indexed = std::any_of(first, last, [&](const auto& kv) {
        return kv.second.length == r.length && kv.second.crc32c == r.crc32c;
      });
      if (!check.entries.empty() && !indexed) {
        report.corrupt_files.push_back(fmt::format(
            "{}: does not match the index of {}", snap.FilePath(f), name));
      }
    }
    if (progress) progress(c + 1, snap.chunk_count(), report.bytes_checked);
  }
  return report;
}

}  // namespace stoker::dataset
