// Synthetic ImageNet-shaped metadata for the metadata benchmarks (metadata_scale,
// compaction_scale; docs/benchmarks.md §14): file i is "train/n%08d/n%08d_i.JPEG" in one of
// 1000 class directories, 60-160 KB long, stored in a mixed order (an affine permutation of
// the file numbers) over 64 MiB chunks. No chunk bytes exist: metadata never reads them.
#pragma once

#include <sys/resource.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "format/chunk.h"
#include "format/segment_builder.h"
#include "format/segment_layout.h"
#include "stoker/storage.h"

namespace stoker::bench {

inline constexpr uint32_t kClasses = 1000;
inline constexpr uint64_t kChunkBytes = 64ull << 20;

inline double Seconds(std::chrono::steady_clock::time_point since) {
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

inline uint64_t Mix(uint64_t x) {  // splitmix64's finaliser: a well-spread hash of a file number
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline std::string PathOf(uint64_t i) {
  const uint64_t c = 1440764 + (i % kClasses) * 17;
  return fmt::format("train/n{:08d}/n{:08d}_{}.JPEG", c, c, i);
}
inline uint64_t LengthOf(uint64_t i) { return 60000 + Mix(i) % 100000; }

inline uint64_t PeakRssBytes() {
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

// Calls fn(file, chunk, entry, bytes used in the chunk before it) for files [first, first +
// count) in storage order, cutting 64 MiB chunks; returns the chunks (ids unique per `first`).
template <typename Fn>
std::vector<format::ChunkInfo> Place(uint64_t first, uint64_t count, Fn&& fn) {
  const Order order(count);
  std::vector<format::ChunkInfo> chunks;
  uint64_t used = 0;
  const auto close = [&] {
    chunks.back().file_size = format::kChunkHeaderSize + used + format::kChunkFooterSize +
                              format::kChunkIndexEntrySize * chunks.back().entry_count;
  };
  for (uint64_t k = 0; k < count; ++k) {
    const uint64_t i = first + order(k);
    if (chunks.empty() || used + LengthOf(i) > kChunkBytes) {
      if (!chunks.empty()) close();
      chunks.push_back({(first << 20) + 0x1000 + chunks.size(), 0, 0, 0});
      used = 0;
    }
    fn(i, static_cast<uint32_t>(chunks.size() - 1), chunks.back().entry_count, used);
    used += LengthOf(i);
    ++chunks.back().entry_count;
  }
  if (!chunks.empty()) close();
  return chunks;
}

// Streams the segment of files [first, first + count) into `name`, as `stoker pack` builds
// one (external sort on disk); `first` is also its first file index. Returns its size.
inline Result<uint64_t> WriteSyntheticSegment(Storage& storage, const std::string& name,
                                              const std::string& temp_dir, uint64_t first,
                                              uint64_t count) {
  format::SegmentBuilder builder(SortOptions{temp_dir, 64ull << 20});
  Status added;
  const auto chunks =
      Place(first, count, [&](uint64_t i, uint32_t chunk, uint64_t entry, uint64_t) {
        if (!added.ok()) return;
        const std::string path = PathOf(i);
        added =
            builder.Add({path, chunk, entry, LengthOf(i), static_cast<uint32_t>(Mix(i)), -1, {}});
      });
  STOKER_RETURN_IF_ERROR(added);
  STOKER_RETURN_IF_ERROR(builder.Seal(chunks, format::Grouping::kFiles));
  format::SegmentNumbering numbering;
  numbering.flags = format::kSegmentLabelled | format::kSegmentLabelsFromDirs;
  numbering.labels = format::LabelSource::kDirs;
  numbering.first_file = numbering.first_sample = first;
  if (first == 0) {
    numbering.classes = builder.first_level_dirs();  // "train": one class directory
  } else {
    numbering.first_label = 1;  // "train" is class 0 already
  }
  numbering.dir_labels = {0};
  STOKER_ASSIGN_OR_RETURN(auto out, storage.Create(name));
  format::WritableFileSink sink(*out);
  STOKER_RETURN_IF_ERROR(builder.Write(numbering, sink));
  STOKER_RETURN_IF_ERROR(sink.Flush());
  STOKER_RETURN_IF_ERROR(out->Close());
  return sink.size();
}

}  // namespace stoker::bench
