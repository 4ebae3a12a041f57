// Segment::Open and every read on arbitrary bytes, checksums off so that the structural checks
// behind them are reached. Besides never crashing: every file a segment lists by position must
// be found again by its path at that position, and its location must lie inside its chunk.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "format/segment.h"
#include "fuzz_check.h"

namespace {

class BytesFile final : public stoker::RandomAccessFile {
 public:
  BytesFile(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint64_t Size() const override { return size_; }
  stoker::Status ReadAt(uint64_t offset, std::span<std::byte> dst) const override {
    if (offset > size_ || dst.size() > size_ - offset) return stoker::Status::IOError("past end");
    if (!dst.empty()) std::memcpy(dst.data(), data_ + offset, dst.size());
    return stoker::Status::OK();
  }

 private:
  const uint8_t* data_;
  size_t size_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stoker::format;
  SegmentOpenOptions options;
  options.verify_checksums = false;
  auto seg = Segment::Open(std::make_shared<BytesFile>(data, size), "fuzz.seg", options);
  if (!seg) return 0;
  const Segment& s = **seg;
  const uint64_t files = std::min<uint64_t>(s.info().file_count, 512);
  for (uint64_t p = 0; p < files; ++p) {
    auto path = s.FilePath(p);
    if (!path) continue;
    auto found = s.FindFile(*path);
    // Keys are checked to increase strictly, so a path is found where it is listed (or the
    // lookup's block read fails).
    if (found && found->has_value()) FUZZ_CHECK(**found == p);
    auto l = s.FileLocation(p);
    if (l) {
      FUZZ_CHECK(l->chunk < s.info().chunk_count);
      // Its chunk record was read (and checked) to place it.
      const auto ch = s.chunk(l->chunk);
      FUZZ_CHECK(ch.has_value());
      FUZZ_CHECK(l->offset + l->length <= ch->file_size);
    }
    (void)s.Attributes(p);
  }
  const bool samples = s.LoadSamples().ok();
  for (uint64_t k = 0; samples && k < std::min<uint64_t>(s.info().sample_count, 512); ++k) {
    const auto [first, count] = s.SampleFiles(k);
    FUZZ_CHECK(first + count <= s.info().file_count);
  }
  (void)s.ChildDirs("");
  (void)s.FindDir("");
  (void)s.ForEachLocation([](uint64_t, const SegmentLocation&) {});
  (void)s.CheckEveryBlock();
  return 0;
}
