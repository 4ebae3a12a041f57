// `stoker gc`: old versions go, what kept versions use stays, and nothing unreferenced is
// deleted before gc has seen it so for the grace period (an in-flight writer's files, a reader
// of a removed version).
#include <gtest/gtest.h>

#include <set>

#include "dataset/gc.h"
#include "dataset/packer.h"
#include "dataset/verify.h"
#include "dataset/version_view.h"
#include "format/chunk.h"
#include "format/version_record.h"
#include "format/versions.h"
#include "stoker/dataset.h"
#include "storage/forwarding_storage.h"
#include "storage/memory_storage.h"
#include "testing/test_util.h"

namespace stoker::dataset {
namespace {

using test::AsString;

constexpr uint64_t kT0 = 1'800'000'000;  // a fixed clock, so grace periods are exact

test::Tree Files(int batch) {
  test::Tree t;
  for (int i = 0; i < 6; ++i) {
    t.files["c" + std::to_string(batch) + "/" + std::to_string(i)] =
        test::RandomBytes(10 * batch + i, 3000);
  }
  return t;
}

class GcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PackOptions options;
    options.chunk_bytes = 8192;
    for (int batch = 0; batch < 3; ++batch) {  // versions 1, 2, 3
      options.append = batch > 0;
      ASSERT_TRUE(Pack(*test::TreeSource(trees_[batch]), *store_, options).has_value());
    }
  }
  std::set<std::string> Files(std::string_view dir) {
    auto names = store_->List(dir);
    return names ? std::set<std::string>(names->begin(), names->end()) : std::set<std::string>();
  }
  GcSummary Gc(uint64_t now, uint64_t keep = 1, bool dry_run = false) {
    GcOptions o;
    o.keep = keep;
    o.grace = std::chrono::seconds(3600);
    o.now_unix_seconds = now;
    o.dry_run = dry_run;
    auto s = CollectGarbage(*store_, o);
    EXPECT_TRUE(s.has_value()) << s.error().ToString();
    return s.value_or(GcSummary{});
  }
  void ExpectNewestIntact() {
    auto ds = Dataset::Open(store_).value();
    EXPECT_EQ(ds->version(), 3u);
    for (const auto& tree : trees_) {
      for (const auto& [path, bytes] : tree.files) {
        EXPECT_EQ(AsString(ds->ReadFile(ds->Find(path).value()).value()), bytes) << path;
      }
    }
    EXPECT_TRUE(Verify(*store_).value().ok());
  }

  std::shared_ptr<storage::MemoryStorage> store_ = std::make_shared<storage::MemoryStorage>();
  const test::Tree trees_[3] = {dataset::Files(0), dataset::Files(1), dataset::Files(2)};
};

TEST_F(GcTest, AppendOnlyVersionsShareEverythingSoOnlyRecordsGo) {
  const auto chunks = Files("chunks");
  const auto segments = Files("segments");
  GcSummary s = Gc(kT0);
  EXPECT_EQ(s.versions_removed, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(s.versions_kept, (std::vector<uint64_t>{3}));
  EXPECT_TRUE(s.files_removed.empty());  // version 3 uses every segment and chunk
  EXPECT_EQ(s.files_pending, 0u);
  EXPECT_EQ(Files("chunks"), chunks);
  EXPECT_EQ(Files("segments"), segments);
  DatasetOpenOptions v1;
  v1.version = 1;
  EXPECT_TRUE(Dataset::Open(store_, v1).error().IsNotFound());
  ExpectNewestIntact();
}

TEST_F(GcTest, UnreferencedFilesGoOnlyAfterTheGracePeriod) {
  // Leftovers of a writer that died after writing a chunk and a segment, and one still at work.
  store_->SetContents("chunks/00000000000000aa.chunk", "orphan");
  store_->SetContents("segments/00000000000000bb.seg", "orphan");
  store_->SetContents("versions/0000000000000004.version.tmp-1234", "half a record");
  GcSummary first = Gc(kT0, 3);
  EXPECT_TRUE(first.versions_removed.empty());
  EXPECT_TRUE(first.files_removed.empty());
  EXPECT_EQ(first.files_pending, 3u);
  // Within the grace period: still there, even though gc ran again.
  EXPECT_TRUE(Gc(kT0 + 3599, 3).files_removed.empty());
  EXPECT_TRUE(Files("chunks").contains("00000000000000aa.chunk"));
  // A file that appears later has its own clock.
  store_->SetContents("chunks/00000000000000cc.chunk", "a writer still at work");
  GcSummary later = Gc(kT0 + 3600, 3);
  EXPECT_EQ(std::set<std::string>(later.files_removed.begin(), later.files_removed.end()),
            (std::set<std::string>{"chunks/00000000000000aa.chunk",
                                   "segments/00000000000000bb.seg",
                                   "versions/0000000000000004.version.tmp-1234"}));
  EXPECT_EQ(later.files_pending, 1u);
  EXPECT_TRUE(Files("chunks").contains("00000000000000cc.chunk"));
  EXPECT_FALSE(Files("chunks").contains("00000000000000aa.chunk"));
  ExpectNewestIntact();
}

TEST_F(GcTest, FilesOfARemovedVersionOutliveItByTheGracePeriod) {
  // A version that replaced nothing cannot show this; drop a version whose segment no later
  // version lists: version 4 is published beside (not on top of) version 3's files.
  auto v3 = format::ReadVersion(*store_, 3).value();
  format::VersionRecord v4 = v3;
  v4.version = 4;
  v4.parent = 3;
  const format::SegmentRef dropped = v4.segments.back();
  v4.segments.pop_back();
  v4.files -= dropped.files;
  v4.samples -= dropped.samples;
  v4.classes -= dropped.classes;
  v4.chunks -= dropped.chunks;
  auto third = format::Segment::Open(store_->OpenRead(format::SegmentPath(dropped.id)).value(), "x")
                   .value();
  v4.bytes -= third->info().total_bytes;
  ASSERT_TRUE(format::PublishVersionRecord(*store_, v4).ok());

  GcSummary first = Gc(kT0);  // keeps 4: version 3's own segment and chunks are unreferenced
  EXPECT_EQ(first.versions_removed, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_TRUE(first.files_removed.empty());
  EXPECT_EQ(first.files_pending, 1 + dropped.chunks);
  // A reader that opened version 3 before gc can still read it within the grace period.
  EXPECT_TRUE(store_->Exists(format::SegmentPath(dropped.id)).value());
  GcSummary second = Gc(kT0 + 7200);
  EXPECT_EQ(second.files_removed.size(), 1 + dropped.chunks);
  EXPECT_FALSE(store_->Exists(format::SegmentPath(dropped.id)).value());
  auto ds = Dataset::Open(store_).value();
  EXPECT_EQ(ds->version(), 4u);
  EXPECT_EQ(ds->file_count(), trees_[0].files.size() + trees_[1].files.size());
  EXPECT_TRUE(Verify(*store_).value().ok());
}

TEST_F(GcTest, DryRunChangesNothingAndKeepMustBePositive) {
  store_->SetContents("chunks/00000000000000aa.chunk", "orphan");
  const auto before = store_->List("versions").value();
  GcSummary s = Gc(kT0, 1, /*dry_run=*/true);
  EXPECT_EQ(s.versions_removed.size(), 2u);
  EXPECT_EQ(store_->List("versions").value(), before);
  EXPECT_FALSE(store_->Exists("gc/pending").value());
  GcOptions zero;
  zero.keep = 0;
  EXPECT_EQ(CollectGarbage(*store_, zero).error().code(), StatusCode::kInvalidArgument);
}

TEST_F(GcTest, APackWhoseChunksWereCollectedPublishesNothing) {
  // A writer slower than the grace period: gc removed its chunk before it published. Simulated
  // by a storage that deletes each new chunk right after the pack finishes it.
  class Collector : public storage::ForwardingStorage {
   public:
    using ForwardingStorage::ForwardingStorage;
    Result<std::unique_ptr<WritableFile>> Create(std::string_view path) override {
      if (path.starts_with("segments/")) {  // chunks are done: gc strikes now
        const std::vector<std::string> names = base()->List("chunks").value();
        for (const auto& name : names) {
          if (!before_.contains(name)) (void)base()->Remove("chunks/" + name);
        }
      }
      return ForwardingStorage::Create(path);
    }
    std::set<std::string> before_;
  };
  auto collector = std::make_shared<Collector>(store_);
  const std::vector<std::string> before = store_->List("chunks").value();
  collector->before_.insert(before.begin(), before.end());
  PackOptions append;
  append.append = true;
  test::Tree late;
  late.files["late/x"] = "x";
  auto result = Pack(*test::TreeSource(late), *collector, append);
  ASSERT_FALSE(result.has_value());
  EXPECT_NE(result.error().message().find("stoker gc"), std::string::npos);
  EXPECT_EQ(Dataset::Open(store_).value()->version(), 3u);
}

// A writer that publishes while gc runs (after gc listed the versions, before it deletes):
// gc looks at the versions again before deleting, so even with no grace period the new
// version keeps its segment and chunks.
TEST_F(GcTest, AVersionPublishedWhileGcRunsKeepsItsFiles) {
  class PublishDuringGc : public storage::ForwardingStorage {
   public:
    PublishDuringGc(std::shared_ptr<Storage> base, std::function<void()> publish)
        : ForwardingStorage(std::move(base)), publish_(std::move(publish)) {}
    Result<std::vector<std::string>> List(std::string_view path) override {
      if (path == "chunks" && publish_) std::exchange(publish_, {})();
      return ForwardingStorage::List(path);
    }
    std::function<void()> publish_;
  };
  test::Tree late;
  late.files["late/x"] = test::RandomBytes(99, 5000);
  PublishDuringGc racing(store_, [&] {
    PackOptions append;
    append.append = true;
    ASSERT_TRUE(Pack(*test::TreeSource(late), *store_, append).has_value());
  });
  GcOptions o;
  o.keep = 1;
  o.grace = std::chrono::seconds(0);
  o.now_unix_seconds = kT0;
  auto s = CollectGarbage(racing, o);
  ASSERT_TRUE(s.has_value()) << s.error().ToString();
  auto ds = Dataset::Open(store_).value();
  EXPECT_EQ(ds->version(), 4u);
  EXPECT_EQ(AsString(ds->ReadFile(ds->Find("late/x").value()).value()), late.files["late/x"]);
  EXPECT_TRUE(Verify(*store_).value().ok());
}

}  // namespace
}  // namespace stoker::dataset
