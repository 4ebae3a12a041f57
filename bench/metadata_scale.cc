// Metadata at scale, format 1 (one snapshot) against format 2 (segments), same entries, same
// run (docs/benchmarks.md §14). Synthetic ImageNet-shaped metadata: `--files` paths
// "train/n%08d/n%08d_%d.JPEG" over 1000 classes, lengths ~110 KB, stored in a mixed order over
// 64 MiB chunks. No chunk bytes exist: metadata never reads them.
//
// Prints one JSON object: per format, metadata bytes per file, build seconds, and for format 2
// the bytes an open and a path lookup read (the range reads a remote client would make).
//
//   metadata_scale --files=1000000 [--lookups=2000]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/random.h"
#include "format/chunk.h"
#include "format/segment.h"
#include "format/segment_builder.h"
#include "format/segment_layout.h"
#include "format/snapshot.h"
#include "format/snapshot_builder.h"

namespace stoker {
namespace {

constexpr uint32_t kClasses = 1000;
constexpr uint64_t kChunkBytes = 64ull << 20;

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

class CountingFile final : public RandomAccessFile {
 public:
  explicit CountingFile(const std::string* bytes) : bytes_(bytes) {}
  uint64_t Size() const override { return bytes_->size(); }
  Status ReadAt(uint64_t offset, std::span<std::byte> dst) const override {
    if (offset > bytes_->size() || dst.size() > bytes_->size() - offset) {
      return Status::IOError("past the end");
    }
    std::memcpy(dst.data(), bytes_->data() + offset, dst.size());
    read_bytes += dst.size();
    return Status::OK();
  }
  mutable uint64_t read_bytes = 0;

 private:
  const std::string* bytes_;
};

class StringBytes final : public FileBytes {
 public:
  explicit StringBytes(const std::string* s) : s_(s) {}
  std::span<const std::byte> bytes() const override {
    return {reinterpret_cast<const std::byte*>(s_->data()), s_->size()};
  }

 private:
  const std::string* s_;
};

int Run(uint64_t files, uint64_t lookups) {
  Pcg32 rng(42);
  std::vector<std::string> paths(files);
  std::vector<uint64_t> lengths(files);
  for (uint64_t i = 0; i < files; ++i) {
    const uint64_t c = i % kClasses;
    paths[i] = fmt::format("train/n{:08d}/n{:08d}_{}.JPEG", 1440764 + c * 17, 1440764 + c * 17, i);
    lengths[i] = 60000 + rng.Below(100000);
  }
  // Mixed storage order: a seeded permutation, cut into 64 MiB chunks.
  std::vector<uint64_t> order(files);
  for (uint64_t i = 0; i < files; ++i) order[i] = i;
  for (uint64_t i = files; i > 1; --i) std::swap(order[i - 1], order[rng.Below(i)]);
  std::vector<format::ChunkInfo> chunks;
  std::vector<uint32_t> chunk_of(files);
  std::vector<uint64_t> offset_of(files);
  uint64_t used = 0;
  for (uint64_t k = 0; k < files; ++k) {
    const uint64_t i = order[k];
    if (chunks.empty() || used + lengths[i] > kChunkBytes) {
      if (!chunks.empty()) {
        chunks.back().file_size = format::kChunkHeaderSize + used + format::kChunkFooterSize +
                                  format::kChunkIndexEntrySize * chunks.back().entry_count;
      }
      chunks.push_back({0x1000 + chunks.size(), 0, 0, 0});
      used = 0;
    }
    chunk_of[i] = static_cast<uint32_t>(chunks.size() - 1);
    offset_of[i] = format::kChunkHeaderSize + used;
    used += lengths[i];
    ++chunks.back().entry_count;
  }
  chunks.back().file_size = format::kChunkHeaderSize + used + format::kChunkFooterSize +
                            format::kChunkIndexEntrySize * chunks.back().entry_count;

  std::string v1_bytes;
  double v1_build = 0;
  {
    format::SnapshotSpec spec;
    spec.chunks = chunks;
    spec.labels = format::LabelMode::kFirstDirectory;
    spec.entries.resize(files);
    for (uint64_t i = 0; i < files; ++i) {
      auto& e = spec.entries[i];
      e.path = paths[i];
      e.chunk = chunk_of[i];
      e.offset = offset_of[i];
      e.length = static_cast<uint32_t>(lengths[i]);
    }
    const auto start = std::chrono::steady_clock::now();
    v1_bytes = format::BuildSnapshot(std::move(spec)).value();
    v1_build = Seconds(start);
  }
  std::string v2_bytes;
  double v2_build = 0;
  {
    format::SegmentSpec spec;
    spec.flags = format::kSegmentLabelled | format::kSegmentLabelsFromDirs;
    spec.chunks = chunks;
    for (uint32_t c = 0; c < kClasses; ++c) {
      spec.classes.push_back(fmt::format("n{:08d}", 1440764 + c * 17));
    }
    spec.files.resize(files);
    for (uint64_t i = 0; i < files; ++i) {
      auto& f = spec.files[i];
      f.path = paths[i];
      f.chunk = chunk_of[i];
      f.offset = offset_of[i];
      f.length = lengths[i];
      f.label = static_cast<int32_t>(i % kClasses);
    }
    const auto start = std::chrono::steady_clock::now();
    v2_bytes = format::BuildSegment(std::move(spec)).value();
    v2_build = Seconds(start);
  }

  // Format 1: the whole snapshot is what any open maps (and what a remote open moves).
  auto snap = format::Snapshot::Open(std::make_shared<StringBytes>(&v1_bytes), "v1").value();
  // Format 2: what an open and each lookup read.
  auto file = std::make_shared<CountingFile>(&v2_bytes);
  auto start = std::chrono::steady_clock::now();
  auto seg = format::Segment::Open(file, "v2").value();
  const double v2_open = Seconds(start);
  const uint64_t open_bytes = file->read_bytes;
  uint64_t found = 0;
  start = std::chrono::steady_clock::now();
  for (uint64_t n = 0; n < lookups; ++n) {
    const uint64_t i = rng.Below(files);
    auto position = seg->FindFile(paths[i]).value();
    if (position && seg->FileLocation(*position).value().length == lengths[i]) ++found;
  }
  const double v2_lookup_us = Seconds(start) * 1e6 / static_cast<double>(lookups);
  const uint64_t lookup_bytes = (file->read_bytes - open_bytes) / lookups;
  start = std::chrono::steady_clock::now();
  for (uint64_t n = 0; n < lookups; ++n) found += snap->FindFile(paths[rng.Below(files)]).has_value();
  const double v1_lookup_us = Seconds(start) * 1e6 / static_cast<double>(lookups);
  if (found != 2 * lookups) {
    std::fprintf(stderr, "metadata_scale: lookups failed\n");
    return 1;
  }
  std::printf(
      "%s\n",
      fmt::format(
          R"({{"files": {}, "chunks": {}, "format1": {{"bytes": {}, "bytes_per_file": {:.1f}, "build_s": {:.2f}, "lookup_us": {:.2f}}}, )"
          R"("format2": {{"bytes": {}, "bytes_per_file": {:.1f}, "build_s": {:.2f}, "open_s": {:.4f}, "open_read_bytes": {}, "lookup_read_bytes": {}, "stat_read_fraction": {:.4f}, "lookup_us": {:.2f}}}}})",
          files, chunks.size(), v1_bytes.size(), double(v1_bytes.size()) / files, v1_build,
          v1_lookup_us, v2_bytes.size(), double(v2_bytes.size()) / files, v2_build, v2_open,
          open_bytes, lookup_bytes, double(open_bytes + lookup_bytes) / v2_bytes.size(),
          v2_lookup_us)
          .c_str());
  return 0;
}

}  // namespace
}  // namespace stoker

int main(int argc, char** argv) {
  uint64_t files = 1000000, lookups = 2000;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a.starts_with("--files=")) files = std::stoull(std::string(a.substr(8)));
    else if (a.starts_with("--lookups=")) lookups = std::stoull(std::string(a.substr(10)));
    else {
      std::fprintf(stderr, "usage: metadata_scale [--files=N] [--lookups=N]\n");
      return 2;
    }
  }
  return stoker::Run(files, lookups);
}
