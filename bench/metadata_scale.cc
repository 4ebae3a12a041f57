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
#include <filesystem>
#include <numeric>
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
#include "synthetic_metadata.h"

namespace stoker {
namespace {

using namespace bench;

int Run(uint64_t files, uint64_t lookups, bool format1, const std::string& dir) {
  // Format 2, streamed as `stoker pack` does.
  auto storage = storage::NewPosixStorage(dir);
  const std::string name = fmt::format("metadata-scale-{}.seg", ::getpid());
  uint64_t v2_size = 0;
  double v2_build = 0;
  {
    const auto start = std::chrono::steady_clock::now();
    auto size = bench::WriteSyntheticSegment(*storage, name, dir, 0, files);
    if (!size) {
      std::fprintf(stderr, "metadata_scale: building failed: %s\n",
                   size.error().ToString().c_str());
      return 1;
    }
    v2_size = *size;
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
    spec.chunks = Place(0, files, [&](uint64_t i, uint32_t chunk, uint64_t, uint64_t used) {
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

// NOLINTNEXTLINE(bugprone-exception-escape): a bad flag ends the benchmark; terminate names it
int main(int argc, char** argv) {
  uint64_t files = 1000000, lookups = 2000;
  int format1 = -1;
  std::string dir = "/var/tmp";
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a.starts_with("--files="))
      files = std::stoull(std::string(a.substr(8)));
    else if (a.starts_with("--lookups="))
      lookups = std::stoull(std::string(a.substr(10)));
    else if (a.starts_with("--format1="))
      format1 = a.substr(10) == "1";
    else if (a.starts_with("--dir="))
      dir = a.substr(6);
    else {
      std::fprintf(stderr,
                   "usage: metadata_scale [--files=N] [--lookups=N] [--format1=0|1] [--dir=D]\n");
      return 2;
    }
  }
  if (format1 < 0) format1 = files <= 10000000;
  return stoker::Run(files, lookups, format1 == 1, dir);
}
