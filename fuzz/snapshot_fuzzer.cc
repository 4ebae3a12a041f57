// Snapshot::Open on arbitrary bytes. The structural validation at Open is what lets every
// accessor trust the mapped bytes without bounds checks, so the property is: whatever the input,
// Open either fails cleanly or returns a snapshot whose every accessor, over every index it
// advertises, stays inside the buffer (ASan), terminates, and keeps the ranges it promises.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "format/snapshot.h"
#include "fuzz_check.h"

namespace {

using stoker::format::Snapshot;

// Borrows libFuzzer's buffer, which is a heap copy of exactly the input's size, so ASan flags
// a read one byte past the end.
class BorrowedBytes final : public stoker::FileBytes {
 public:
  explicit BorrowedBytes(std::span<const std::byte> bytes) : bytes_(bytes) {}
  std::span<const std::byte> bytes() const override { return bytes_; }

 private:
  std::span<const std::byte> bytes_;
};

std::string_view Trim(std::string_view path) {
  while (!path.empty() && path.front() == '/') path.remove_prefix(1);
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  return path;
}

// Lookups may return nullopt for anything (a fuzzed table need not hold every path), but a hit
// must be an entry whose path is the one asked for.
void LookUp(const Snapshot& snap, std::string_view path) {
  if (auto f = snap.FindFile(path)) {
    FUZZ_CHECK(*f < snap.file_count());
    FUZZ_CHECK(snap.FilePath(*f) == Trim(path));
  }
  if (auto d = snap.FindDir(path)) {
    FUZZ_CHECK(*d < snap.dir_count());
    if (!Trim(path).empty()) FUZZ_CHECK(snap.dir_path(*d) == Trim(path));
  }
}

void Exercise(const Snapshot& snap, std::string_view extra) {
  size_t sink = snap.dataset_version() + snap.created_unix_seconds() + snap.total_bytes() +
                snap.size_bytes() + snap.crc32c() + snap.labelled() + snap.grouped();
  for (uint32_t c = 0; c < snap.chunk_count(); ++c) sink += snap.chunk(c).entry_count;
  for (uint32_t d = 0; d < snap.dir_count(); ++d) {
    const auto r = snap.dir(d);
    sink += snap.dir_path(d).size() + snap.dir_name(d).size();
    if (r.child_count > 0) {
      FUZZ_CHECK(r.first_child < snap.dir_count());
      FUZZ_CHECK(r.child_count <= snap.dir_count() - r.first_child);
      for (uint32_t k = 0; k < r.child_count; ++k) {
        FUZZ_CHECK(snap.dir(r.first_child + k).parent == d);
      }
    }
    if (r.file_count > 0) {
      FUZZ_CHECK(r.first_file < snap.file_count());
      FUZZ_CHECK(r.file_count <= snap.file_count() - r.first_file);
      for (uint32_t k = 0; k < r.file_count; ++k) FUZZ_CHECK(snap.file(r.first_file + k).dir == d);
    }
    LookUp(snap, snap.dir_path(d));
  }
  for (uint32_t i = 0; i < snap.file_count(); ++i) {
    const auto f = snap.file(i);
    FUZZ_CHECK(f.dir < snap.dir_count());
    FUZZ_CHECK(f.chunk < snap.chunk_count());
    FUZZ_CHECK(f.offset + f.length <= snap.chunk(f.chunk).file_size);
    const std::string path = snap.FilePath(i);
    sink += path.size() + snap.file_name(i).size();
    if (f.label >= 0) {
      FUZZ_CHECK(static_cast<uint32_t>(f.label) < snap.class_count());
      sink += snap.class_name(static_cast<uint32_t>(f.label)).size();
    }
    for (const auto& [key, value] : snap.FileAttributes(i)) sink += key.size() + value.size();
    LookUp(snap, path);
  }
  for (uint32_t s = 0; s < snap.sample_count(); ++s) {
    const auto [first, count] = snap.SampleFiles(s);
    FUZZ_CHECK(count >= 1 && first < snap.file_count() && count <= snap.file_count() - first);
    sink += static_cast<uint32_t>(snap.sample_label(s));
  }
  for (uint32_t k = 0; k <= snap.class_count(); ++k) sink += snap.class_name(k).size();
  FUZZ_CHECK(snap.class_name(snap.class_count()).empty());
  // Paths nobody stored: pieces of the input itself, and some edge cases.
  for (std::string_view p : {"", "/", "//", "a", "a/b", "/a/", "a//b", "."}) LookUp(snap, p);
  while (!extra.empty()) {
    const size_t n = std::min<size_t>(extra.size(), 1 + static_cast<uint8_t>(extra[0]) % 24);
    LookUp(snap, extra.substr(0, n));
    extra.remove_prefix(n);
  }
  // Keep the reads from being optimized away.
  asm volatile("" : : "r"(sink));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  auto file = std::make_shared<BorrowedBytes>(bytes);
  // The production path: a CRC32C over the whole file first, which almost every mutation fails
  // early. Only inputs with a matching checksum (the seeds) get past it.
  auto checked = Snapshot::Open(file, "fuzz", {.verify_checksum = true});
  // Skipping the checksum reaches the structural checks behind it, which are what keep the
  // accessors in bounds.
  auto snap = Snapshot::Open(file, "fuzz", {.verify_checksum = false});
  if (checked) FUZZ_CHECK(snap.has_value());
  if (!snap) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Exercise(**snap, text.substr(text.size() - std::min<size_t>(text.size(), 64)));
  return 0;
}
