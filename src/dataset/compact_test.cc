// `stoker compact`: the compacted version is the same dataset (every path, index, label,
// sample, byte, listing) with fewer segments; writers racing a compaction land; a compaction
// racing another publishes nothing.
#include <gtest/gtest.h>

#include <map>

#include <fmt/format.h>

#include "dataset/compact.h"
#include "dataset/packer.h"
#include "dataset/verify.h"
#include "dataset/version_view.h"
#include "format/versions.h"
#include "stoker/dataset.h"
#include "storage/forwarding_storage.h"
#include "storage/memory_storage.h"
#include "testing/test_util.h"

namespace stoker::dataset {
namespace {

using test::AsString;

// Batch b: files in the classes shared by every batch ("a", "b": their keys interleave across
// segments) and one class of its own.
test::Tree Batch(int b) {
  test::Tree t;
  for (int i = 0; i < 40; ++i) {
    for (const std::string& cls : {std::string("a"), std::string("b"), "own" + std::to_string(b)}) {
      t.files[fmt::format("{}/{:03d}-{}.bin", cls, i, b)] = test::RandomBytes(100 * b + i, 200 + i);
    }
  }
  return t;
}

// Everything a reader can ask of every file, by index.
struct Seen {
  std::string path, bytes;
  int32_t label = -1;
  bool operator==(const Seen&) const = default;
};
std::vector<Seen> SeeAll(const std::shared_ptr<Storage>& store, std::optional<uint64_t> version) {
  DatasetOpenOptions o;
  o.version = version;
  auto ds = Dataset::Open(store, o).value();
  std::vector<Seen> out;
  for (uint32_t i = 0; i < ds->file_count(); ++i) {
    const FileInfo info = ds->Stat(i).value();
    EXPECT_EQ(ds->Find(info.path).value(), i) << info.path;
    const auto bytes = ds->ReadFile(i).value();
    out.push_back(Seen{info.path, std::string(AsString(bytes)), info.label});
  }
  return out;
}

class CompactTest : public ::testing::Test {
 protected:
  void Append(int batch) {
    PackOptions options;
    options.chunk_bytes = 8192;
    options.append = batch > 0;
    auto packed = Pack(*test::TreeSource(Batch(batch)), *store_, options);
    ASSERT_TRUE(packed.has_value()) << packed.error().ToString();
  }
  format::VersionRecord Latest() { return format::ReadLatestVersion(*store_).value().value(); }

  std::shared_ptr<storage::MemoryStorage> store_ = std::make_shared<storage::MemoryStorage>();
};

TEST_F(CompactTest, TheCompactedVersionIsTheSameDatasetWithOneSegment) {
  for (int b = 0; b < 4; ++b) Append(b);
  const auto before = SeeAll(store_, std::nullopt);
  auto listing_before = Dataset::Open(store_).value()->List("a").value();
  CompactOptions o;
  o.all = true;
  o.sort.memory_bytes = 4096;  // spill: the sort must work in runs
  auto s = Compact(*store_, o);
  ASSERT_TRUE(s.has_value()) << s.error().ToString();
  EXPECT_EQ(s->base_version, 4u);
  EXPECT_EQ(s->version, 5u);
  EXPECT_EQ(s->segments_before, 4u);
  EXPECT_EQ(s->segments_after, 1u);
  EXPECT_EQ(s->files_merged, before.size());
  EXPECT_EQ(Latest().segments.size(), 1u);
  EXPECT_EQ(Latest().parent, 4u);

  EXPECT_EQ(SeeAll(store_, std::nullopt), before);
  EXPECT_EQ(SeeAll(store_, 4), before);  // the old version stays readable
  auto listing = Dataset::Open(store_).value()->List("a").value();
  ASSERT_EQ(listing.size(), listing_before.size());
  for (size_t k = 0; k < listing.size(); ++k) {
    EXPECT_EQ(listing[k].name, listing_before[k].name);
    EXPECT_EQ(listing[k].index, listing_before[k].index);
  }
  auto ds = Dataset::Open(store_).value();
  for (uint32_t k = 0; k < ds->class_count(); ++k) {
    EXPECT_EQ(ds->ClassName(k), Dataset::Open(store_, {.version = 4}).value()->ClassName(k));
  }
  EXPECT_TRUE(Verify(*store_).value().ok());

  // Appends go on after a compaction: new files after the old, a new class after the old.
  Append(4);
  auto after = SeeAll(store_, std::nullopt);
  ASSERT_EQ(after.size(), before.size() + Batch(4).files.size());
  EXPECT_TRUE(std::equal(before.begin(), before.end(), after.begin()));
  EXPECT_EQ(after.back().label, 6);  // classes a, b, own0..own3, then own4
  // Nothing left to merge under --all? Two segments now: merged again into one.
  EXPECT_EQ(Compact(*store_, o).value().segments_after, 1u);
  EXPECT_EQ(SeeAll(store_, std::nullopt), after);
}

// A chunk's files read alone (what verify and a reader of some chunks do) are exactly those
// the whole location table puts in it, with the same indices and locations, in storage order.
void ExpectChunkFilesMatchTheWholeTable(Storage& store, const format::VersionRecord& record) {
  auto view = VersionView::Open(store, record).value();
  ASSERT_TRUE(view->LoadLocations().ok());
  uint64_t files = 0;
  for (uint32_t c = 0; c < view->chunk_count(); ++c) {
    uint64_t last_offset = 0;
    const auto chunk_files = view->ChunkFiles(c).value();
    for (const auto& [f, l] : chunk_files) {
      ++files;
      const FileLocation& whole = view->file(f);
      EXPECT_EQ(l.chunk, c);
      EXPECT_EQ(whole.chunk, c) << "file " << f;
      EXPECT_EQ(std::tie(l.offset, l.length, l.crc32c, l.label),
                std::tie(whole.offset, whole.length, whole.crc32c, whole.label));
      EXPECT_GE(l.offset, last_offset);
      last_offset = l.offset;
    }
  }
  EXPECT_EQ(files, view->file_count());
}

TEST_F(CompactTest, AChunksFilesReadAloneMatchTheWholeTableInEverySegmentKind) {
  for (int b = 0; b < 3; ++b) Append(b);
  ExpectChunkFilesMatchTheWholeTable(*store_, Latest());  // three appended segments
  CompactOptions o;
  o.all = true;
  ASSERT_TRUE(Compact(*store_, o).has_value());
  ExpectChunkFilesMatchTheWholeTable(*store_, Latest());  // one merged (positioned) segment
}

TEST_F(CompactTest, TieredPolicyMergesSmallTrailingSegmentsOnly) {
  auto refs = [](const std::vector<uint64_t>& files) {
    std::vector<format::SegmentRef> out;
    out.reserve(files.size());
    for (uint64_t f : files) out.push_back({.files = f});
    return out;
  };
  using Run = std::pair<size_t, size_t>;
  EXPECT_EQ(SegmentsToMerge(refs({1000}), false), Run(1, 1));
  EXPECT_EQ(SegmentsToMerge(refs({1000, 10}), false), Run(2, 2));  // 1000 > 10: keep apart
  EXPECT_EQ(SegmentsToMerge(refs({1000, 10, 10}), false), Run(1, 3));
  EXPECT_EQ(SegmentsToMerge(refs({1000, 30, 10, 10, 10}), false), Run(1, 5));
  EXPECT_EQ(SegmentsToMerge(refs({1000, 40, 10, 10}), false), Run(2, 4));
  EXPECT_EQ(SegmentsToMerge(refs({1000, 10}), true), Run(0, 2));
  EXPECT_EQ(SegmentsToMerge(refs({5}), true), Run(1, 1));
}

TEST_F(CompactTest, NothingToMergeChangesNothing) {
  Append(0);
  auto s = Compact(*store_, {});
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->segments_merged, 0u);
  EXPECT_EQ(s->version, 0u);
  EXPECT_EQ(Latest().version, 1u);
  Append(1);
  CompactOptions dry;
  dry.all = true;
  dry.dry_run = true;
  EXPECT_EQ(Compact(*store_, dry).value().segments_merged, 2u);
  EXPECT_EQ(Latest().version, 2u);
  EXPECT_EQ(store_->List("segments").value().size(), 2u);
  EXPECT_TRUE(Compact(*std::make_shared<storage::MemoryStorage>(), {}).error().IsNotFound());
}

// Runs `before_publish` once, just before the first version record is created: another
// writer getting in between a compaction's read of the newest version and its publish.
class RaceStorage : public storage::ForwardingStorage {
 public:
  RaceStorage(std::shared_ptr<Storage> base, std::function<void()> before_publish)
      : ForwardingStorage(std::move(base)), before_publish_(std::move(before_publish)) {}
  Status CreateExclusive(std::string_view path, std::span<const std::byte> bytes) override {
    if (path.starts_with("versions/") && before_publish_) std::exchange(before_publish_, {})();
    return ForwardingStorage::CreateExclusive(path, bytes);
  }

 private:
  std::function<void()> before_publish_;
};

TEST_F(CompactTest, AnAppendThatPublishesFirstIsKeptAndTheCompactionRebases) {
  for (int b = 0; b < 3; ++b) Append(b);
  const auto before = SeeAll(store_, std::nullopt);
  RaceStorage racing(store_, [&] { Append(3); });
  CompactOptions o;
  o.all = true;
  auto s = Compact(racing, o);
  ASSERT_TRUE(s.has_value()) << s.error().ToString();
  EXPECT_EQ(s->publish_attempts, 2);
  EXPECT_EQ(s->version, 5u);                // 4 is the append's
  EXPECT_EQ(Latest().segments.size(), 2u);  // the merged three, then the append's
  const auto after = SeeAll(store_, std::nullopt);
  EXPECT_EQ(after, SeeAll(store_, 4));
  EXPECT_TRUE(std::equal(before.begin(), before.end(), after.begin()));
  EXPECT_TRUE(Verify(*store_).value().ok());
}

TEST_F(CompactTest, AnotherCompactionFirstMeansThisOnePublishesNothing) {
  for (int b = 0; b < 3; ++b) Append(b);
  CompactOptions o;
  o.all = true;
  RaceStorage racing(store_, [&] { ASSERT_TRUE(Compact(*store_, o).has_value()); });
  auto s = Compact(racing, o);
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code(), StatusCode::kAlreadyExists) << s.error().ToString();
  EXPECT_EQ(Latest().version, 4u);
  // Its merged segment is gone again: the three appended and the winner's merged one remain.
  EXPECT_EQ(store_->List("segments").value().size(), 4u);
}

}  // namespace
}  // namespace stoker::dataset
