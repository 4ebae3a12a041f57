// Metadata at scale, format 1 (one snapshot) against format 2 (segments), same entries, same
// run (docs/benchmarks.md §14). Synthetic ImageNet-shaped metadata: `--files` paths
// "train/n%08d/n%08d_%d.JPEG" over 1000 classes, lengths 60-160 KB, stored in a mixed order
// (an affine permutation of the file numbers) over 64 MiB chunks. No chunk bytes exist:
// metadata never reads them.
//
// Format 2 is built the way `stoker pack` builds it: files stream in storage order into a
// SegmentBuilder (external sort on disk), the segment streams to a file, and nothing is held
// per file, so 10^8 files fit in the same memory as 10^6. Format 1 needs every entry in memory
// (and the old builder several copies), so it is built only with --format1 (the default up to
// 10^7 files).
//
// Prints one JSON object: per format, metadata bytes per file, build seconds (format 2: and
// the process's peak RSS after building it, before format 1 is built), and for format 2 the
// bytes an open and a path lookup read (the range reads a remote client would make).
//
//   metadata_scale --files=1000000 [--lookups=2000] [--format1=0|1] [--dir=/var/tmp]
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <filesystem>
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
#include "storage/posix_storage.h"

namespace stoker {
namespace {

constexpr uint32_t kClasses = 1000;
constexpr uint64_t kChunkBytes = 64ull << 20;

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Counts the bytes read through it: what a remote reader would move.
class CountingFile final : public RandomAccessFile {
 public:
  explicit CountingFile(std::shared_ptr<RandomAccessFile> file) : file_(std::move(file)) {}
  uint64_t Size() const override { return file_->Size(); }
  Status ReadAt(uint64_t offset, std::span<std::byte> dst) const override {
    read_bytes += dst.size();
    return file_->ReadAt(offset, dst);
  }
  mutable uint64_t read_bytes = 0;

 private:
  std::shared_ptr<RandomAccessFile> file_;
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

uint64_t Mix(uint64_t x) {  // splitmix64's finaliser: a well-spread hash of a file number
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::string PathOf(uint64_t i) {
  const uint64_t c = 1440764 + (i % kClasses) * 17;
  return fmt::format("train/n{:08d}/n{:08d}_{}.JPEG", c, c, i);
}
uint64_t LengthOf(uint64_t i) { return 60000 + Mix(i) % 100000; }

uint64_t PeakRssBytes() {
  struct rusage u;
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<uint64_t>(u.ru_maxrss) * 1024;
}

// Storage order: the k-th file stored is file (a·k + b) mod n, a coprime to n.
// (a < n, so a·k fits in 64 bits up to n = 3·10^9.)
struct Order {
  explicit Order(uint64_t files) : n(files) {
    a = (0x9e3779b97f4a7c15ull % n) | 1;
    while (std::gcd(a, n) != 1) a += 2;
    a %= n;
  }
  uint64_t operator()(uint64_t k) const { return (a * k + 12345) % n; }
  uint64_t n, a;
};

// Calls fn(file, chunk, entry) in storage order, cutting 64 MiB chunks; returns the chunks.
template <typename Fn>
std::vector<format::ChunkInfo> Place(uint64_t files, Fn&& fn) {
  const Order order(files);
  std::vector<format::ChunkInfo> chunks;
  uint64_t used = 0;
  const auto close = [&] {
    chunks.back().file_size = format::kChunkHeaderSize + used + format::kChunkFooterSize +
                              format::kChunkIndexEntrySize * chunks.back().entry_count;
  };
  for (uint64_t k = 0; k < files; ++k) {
    const uint64_t i = order(k);
    if (chunks.empty() || used + LengthOf(i) > kChunkBytes) {
      if (!chunks.empty()) close();
      chunks.push_back({0x1000 + chunks.size(), 0, 0, 0});
      used = 0;
    }
    fn(i, static_cast<uint32_t>(chunks.size() - 1), chunks.back().entry_count, used);
    used += LengthOf(i);
    ++chunks.back().entry_count;
  }
  if (!chunks.empty()) close();
  return chunks;
}

int Run(uint64_t files, uint64_t lookups, bool format1, const std::string& dir) {
  // Format 2, streamed as `stoker pack` does.
  auto storage = storage::NewPosixStorage(dir);
  const std::string name = fmt::format("metadata-scale-{}.seg", ::getpid());
  uint64_t v2_size = 0;
  double v2_build = 0;
  {
    const auto start = std::chrono::steady_clock::now();
    format::SegmentBuilder builder(SortOptions{dir, 64ull << 20});
    Status added;
    const auto chunks = Place(files, [&](uint64_t i, uint32_t chunk, uint64_t entry, uint64_t) {
      if (!added.ok()) return;
      const std::string path = PathOf(i);
      added = builder.Add({path, chunk, entry, LengthOf(i), static_cast<uint32_t>(Mix(i)), -1, {}});
    });
    if (!added.ok() || !builder.Seal(chunks, format::Grouping::kFiles).ok()) {
      std::fprintf(stderr, "metadata_scale: building failed\n");
      return 1;
    }
    format::SegmentNumbering numbering;
    numbering.flags = format::kSegmentLabelled | format::kSegmentLabelsFromDirs;
    numbering.labels = format::LabelSource::kDirs;
    numbering.classes = builder.first_level_dirs();  // "train": one class directory
    numbering.dir_labels = {0};
    auto out = storage->Create(name).value();
    format::WritableFileSink sink(*out);
    if (!builder.Write(numbering, sink).ok() || !sink.Flush().ok() || !out->Close().ok()) {
      std::fprintf(stderr, "metadata_scale: writing failed\n");
      return 1;
    }
    v2_size = sink.size();
    v2_build = Seconds(start);
  }
  const uint64_t v2_rss = PeakRssBytes();

  // Format 2: what an open and each lookup read.
  Pcg32 rng(42);
  auto file = std::make_shared<CountingFile>(storage->OpenRead(name).value());
  auto start = std::chrono::steady_clock::now();
  auto seg = format::Segment::Open(file, "v2").value();
  const double v2_open = Seconds(start);
  const uint64_t open_bytes = file->read_bytes;
  uint64_t found = 0;
  start = std::chrono::steady_clock::now();
  for (uint64_t n = 0; n < lookups; ++n) {
    const uint64_t i = rng.Below(static_cast<uint32_t>(std::min<uint64_t>(files, UINT32_MAX)));
    auto position = seg->FindFile(PathOf(i)).value();
    if (position && seg->FileLocation(*position).value().length == LengthOf(i)) ++found;
  }
  const double v2_lookup_us = Seconds(start) * 1e6 / static_cast<double>(lookups);
  const uint64_t lookup_bytes = (file->read_bytes - open_bytes) / lookups;
  seg.reset();
  (void)storage->Remove(name);
  if (found != lookups) {
    std::fprintf(stderr, "metadata_scale: format 2 lookups failed\n");
    return 1;
  }

  std::string format1_json = "null";
  if (format1) {
    format::SnapshotSpec spec;
    spec.labels = format::LabelMode::kFirstDirectory;
    spec.entries.resize(files);
    spec.chunks = Place(files, [&](uint64_t i, uint32_t chunk, uint64_t, uint64_t used) {
      auto& e = spec.entries[i];
      e.path = PathOf(i);
      e.chunk = chunk;
      e.offset = format::kChunkHeaderSize + used;
      e.length = static_cast<uint32_t>(LengthOf(i));
    });
    start = std::chrono::steady_clock::now();
    const std::string v1_bytes = format::BuildSnapshot(std::move(spec)).value();
    const double v1_build = Seconds(start);
    auto snap = format::Snapshot::Open(std::make_shared<StringBytes>(&v1_bytes), "v1").value();
    start = std::chrono::steady_clock::now();
    uint64_t found1 = 0;
    for (uint64_t n = 0; n < lookups; ++n) {
      found1 += snap->FindFile(PathOf(rng.Below(static_cast<uint32_t>(files)))).has_value();
    }
    const double v1_lookup_us = Seconds(start) * 1e6 / static_cast<double>(lookups);
    if (found1 != lookups) {
      std::fprintf(stderr, "metadata_scale: format 1 lookups failed\n");
      return 1;
    }
    format1_json = fmt::format(
        R"({{"bytes": {}, "bytes_per_file": {:.1f}, "build_s": {:.2f}, "lookup_us": {:.2f}}})",
        v1_bytes.size(), double(v1_bytes.size()) / files, v1_build, v1_lookup_us);
  }
  std::printf(
      "%s\n",
      fmt::format(
          R"({{"files": {}, "format1": {}, )"
          R"("format2": {{"bytes": {}, "bytes_per_file": {:.1f}, "build_s": {:.2f}, "build_peak_rss_bytes": {}, "open_s": {:.4f}, "open_read_bytes": {}, "lookup_read_bytes": {}, "stat_read_fraction": {:.4f}, "lookup_us": {:.2f}}}}})",
          files, format1_json, v2_size, double(v2_size) / files, v2_build, v2_rss, v2_open,
          open_bytes, lookup_bytes, double(open_bytes + lookup_bytes) / v2_size, v2_lookup_us)
          .c_str());
  return 0;
}

}  // namespace
}  // namespace stoker

int main(int argc, char** argv) {
  uint64_t files = 1000000, lookups = 2000;
  int format1 = -1;
  std::string dir = "/var/tmp";
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a.starts_with("--files=")) files = std::stoull(std::string(a.substr(8)));
    else if (a.starts_with("--lookups=")) lookups = std::stoull(std::string(a.substr(10)));
    else if (a.starts_with("--format1=")) format1 = a.substr(10) == "1";
    else if (a.starts_with("--dir=")) dir = a.substr(6);
    else {
      std::fprintf(stderr,
                   "usage: metadata_scale [--files=N] [--lookups=N] [--format1=0|1] [--dir=D]\n");
      return 2;
    }
  }
  if (format1 < 0) format1 = files <= 10000000;
  return stoker::Run(files, lookups, format1 == 1, dir);
}
