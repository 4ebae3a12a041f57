// `stoker gc`: old versions go, what kept versions use stays, and nothing unreferenced is
// deleted before gc has seen it so for the grace period (an in-flight writer's files, a reader
// of a removed version).
#include <gtest/gtest.h>

#include <set>

#include <fmt/format.h>

#include "dataset/gc.h"
#include "dataset/packer.h"
#include "dataset/verify.h"
#include "dataset/version_view.h"
#include "dataset/writer_lease.h"
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
  GcSummary Gc(uint64_t now, uint64_t keep = 1, bool dry_run = false,
               std::chrono::seconds grace = std::chrono::seconds(3600)) {
    GcOptions o;
    o.keep = keep;
    o.grace = grace;
    o.now_unix_seconds = now;
    o.dry_run = dry_run;
    auto s = CollectGarbage(*store_, o);
    EXPECT_TRUE(s.has_value()) << s.error().ToString();
    return s.value_or(GcSummary{});
  }
  // From the first removed version on, an unreferenced file may be one that a reader of a
  // removed version still reads: the grace period applies.
  void RemoveVersionOne() {
    EXPECT_EQ(Gc(kT0 - 7200, 2).versions_removed, std::vector<uint64_t>{1});
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

// A reader without a listing (a web server) probes record names from version 1, which gc
// removes: gc leaves versions/latest behind for it first, and never sweeps it.
TEST_F(GcTest, ReadersWithoutAListingStillFindTheNewestVersion) {
  class Unlisted : public storage::ForwardingStorage {
   public:
    using ForwardingStorage::ForwardingStorage;
    Result<std::vector<std::string>> List(std::string_view) override {
      return Err(Status::Unsupported("no listing"));
    }
  };
  auto web = std::make_shared<Unlisted>(store_);
  EXPECT_FALSE(Files("versions").contains("latest"));  // no gc yet: version 1 is there
  EXPECT_EQ(Dataset::Open(web).value()->version(), 3u);
  EXPECT_EQ(Gc(kT0).versions_removed, (std::vector<uint64_t>{1, 2}));
  const auto hint = store_->Map(format::kLatestHintPath).value();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(hint->bytes().data()), hint->bytes().size()),
            "3\n");
  EXPECT_EQ(Dataset::Open(web).value()->version(), 3u);
  EXPECT_EQ(format::ListVersions(*web).value(), std::vector<uint64_t>{3});
  Gc(kT0 + 7200);
  EXPECT_TRUE(Files("versions").contains("latest"));
  EXPECT_EQ(Dataset::Open(web).value()->version(), 3u);
}

TEST_F(GcTest, UnreferencedFilesGoOnlyAfterTheGracePeriod) {
  RemoveVersionOne();
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
            (std::set<std::string>{"chunks/00000000000000aa.chunk", "segments/00000000000000bb.seg",
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
  auto third =
      format::Segment::Open(store_->OpenRead(format::SegmentPath(dropped.id)).value(), "x").value();
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

// Writers' leases: what a writer at work has written stays, whatever the grace period.

constexpr std::chrono::seconds kNoGrace{0};
constexpr std::chrono::hours kNoBeat{1};  // a heartbeat that never comes within a test

TEST_F(GcTest, AWriterAtWorkKeepsItsFilesWhateverTheGracePeriod) {
  auto lease = WriterLease::Take(*store_, kNoBeat).value();
  store_->SetContents("chunks/00000000000000aa.chunk", "written, not yet published");
  GcSummary first = Gc(kT0, 3, false, kNoGrace);
  EXPECT_TRUE(first.files_removed.empty());
  EXPECT_EQ(first.files_held_for_writers, 1u);
  EXPECT_EQ(first.writers_active, 1u);
  EXPECT_TRUE(Gc(kT0 + 300, 3, false, kNoGrace).files_removed.empty());
  EXPECT_TRUE(Files("chunks").contains("00000000000000aa.chunk"));
  lease.reset();  // the writer is done (and published nothing that names the chunk)
  GcSummary after = Gc(kT0 + 301, 3, false, kNoGrace);
  EXPECT_EQ(after.files_removed, std::vector<std::string>{"chunks/00000000000000aa.chunk"});
  EXPECT_EQ(after.writers_active, 0u);
  ExpectNewestIntact();
}

TEST_F(GcTest, AFileSeenBeforeAWriterStartedIsNotHeldForIt) {
  RemoveVersionOne();
  store_->SetContents("chunks/00000000000000aa.chunk", "an old leftover");
  EXPECT_EQ(Gc(kT0, 3).files_pending, 1u);
  auto lease = WriterLease::Take(*store_, kNoBeat).value();
  GcSummary s = Gc(kT0 + 3600, 3);
  EXPECT_EQ(s.files_removed, std::vector<std::string>{"chunks/00000000000000aa.chunk"});
  EXPECT_EQ(s.writers_active, 1u);
  EXPECT_TRUE(lease->Check().ok());
}

TEST_F(GcTest, ALeaseUnchangedForTheWriterTimeoutIsADeadWritersAndGoes) {
  auto dead = WriterLease::Take(*store_, kNoBeat).value();
  auto beating = WriterLease::Take(*store_, kNoBeat).value();
  store_->SetContents("chunks/00000000000000aa.chunk", "a frozen writer's");
  EXPECT_EQ(Gc(kT0, 3, false, kNoGrace).files_held_for_writers, 1u);
  EXPECT_EQ(Gc(kT0 + 599, 3, false, kNoGrace).writers_active, 2u);
  store_->SetContents(beating->path(), "stoker-writer 1\nbeat 7\n");  // a heartbeat
  GcSummary s = Gc(kT0 + 600, 3, false, kNoGrace);
  EXPECT_EQ(s.writers_expired, std::vector<uint64_t>{dead->writer()});
  EXPECT_EQ(s.writers_active, 1u);
  // Held for both writers at first; with the dead one gone, still for the beating one.
  EXPECT_TRUE(Files("chunks").contains("00000000000000aa.chunk"));
  EXPECT_FALSE(store_->Exists(dead->path()).value());
  EXPECT_TRUE(dead->Check().IsNotFound());
  EXPECT_TRUE(beating->Check().ok());
  // The beating writer's lease ages from its last change.
  EXPECT_EQ(Gc(kT0 + 1199, 3, false, kNoGrace).writers_active, 1u);
  GcSummary last = Gc(kT0 + 1200, 3, false, kNoGrace);
  EXPECT_EQ(last.writers_expired, std::vector<uint64_t>{beating->writer()});
  EXPECT_EQ(last.files_removed, std::vector<std::string>{"chunks/00000000000000aa.chunk"});
  ExpectNewestIntact();
}

TEST_F(GcTest, AWriterTimeoutOfZeroTreatsEveryLeaseAsDead) {
  // What a killed writer left (its lease too) goes at once when the user says no writer runs.
  auto killed = WriterLease::Take(*store_, kNoBeat).value();
  store_->SetContents("chunks/00000000000000aa.chunk", "a killed writer's");
  GcOptions o;
  o.keep = 3;
  o.grace = kNoGrace;
  o.writer_timeout = std::chrono::seconds(0);
  o.now_unix_seconds = kT0;
  GcSummary s = CollectGarbage(*store_, o).value();
  EXPECT_EQ(s.writers_expired, std::vector<uint64_t>{killed->writer()});
  EXPECT_EQ(s.files_removed, std::vector<std::string>{"chunks/00000000000000aa.chunk"});
  EXPECT_FALSE(store_->Exists(killed->path()).value());
  ExpectNewestIntact();
}

// gc strikes at one exact step of a pack: the first Exists (or Create) of a path under
// `prefix`. (The packer checks that its chunks exist right before it publishes: the
// interleaving that lost a writer's files before leases.)
class GcDuringPack : public storage::ForwardingStorage {
 public:
  enum class On { kExists, kCreate };
  GcDuringPack(std::shared_ptr<Storage> base, On on, std::string_view prefix,
               std::function<void()> gc)
      : ForwardingStorage(std::move(base)), on_(on), prefix_(prefix), gc_(std::move(gc)) {}
  Result<bool> Exists(std::string_view path) override {
    Strike(On::kExists, path);
    return ForwardingStorage::Exists(path);
  }
  Result<std::unique_ptr<WritableFile>> Create(std::string_view path) override {
    Strike(On::kCreate, path);
    return ForwardingStorage::Create(path);
  }

 private:
  void Strike(On on, std::string_view path) {
    if (on == on_ && path.starts_with(prefix_) && gc_) std::exchange(gc_, {})();
  }
  On on_;
  std::string prefix_;
  std::function<void()> gc_;
};

// Appends one file, "late/x", through `through` (a storage on which gc strikes).
Result<PackSummary> AppendLate(Storage& through, const test::Tree& late) {
  PackOptions append;
  append.append = true;
  append.chunk_bytes = 8192;
  return Pack(*test::TreeSource(late), through, append);
}

TEST_F(GcTest, APackHeldUpBeforePublishingKeepsItsFilesThroughGcWithNoGrace) {
  GcSummary during;
  GcDuringPack racing(store_, GcDuringPack::On::kExists, "chunks/",
                      [&] { during = Gc(kT0, 100, false, kNoGrace); });
  test::Tree late;
  late.files["late/x"] = test::RandomBytes(98, 20000);
  auto packed = AppendLate(racing, late);
  ASSERT_TRUE(packed.has_value()) << packed.error().ToString();
  EXPECT_GT(during.files_held_for_writers, 0u);  // gc ran and held the writer's files
  EXPECT_TRUE(during.files_removed.empty());
  auto ds = Dataset::Open(store_).value();
  EXPECT_EQ(ds->version(), 4u);
  EXPECT_EQ(AsString(ds->ReadFile(ds->Find("late/x").value()).value()), late.files["late/x"]);
  EXPECT_TRUE(Verify(*store_).value().ok());
}

TEST_F(GcTest, APackWhoseLeaseGcExpiredPublishesNothing) {
  // The pack froze longer than gc's writer timeout between its chunks and its segment: two gc
  // runs ten minutes apart saw its lease unchanged, removed it, then its chunks.
  GcSummary expired;
  GcDuringPack frozen(store_, GcDuringPack::On::kCreate, "segments/", [&] {
    Gc(kT0, 100, false, kNoGrace);
    expired = Gc(kT0 + 600, 100, false, kNoGrace);
  });
  test::Tree late;
  late.files["late/x"] = test::RandomBytes(97, 20000);
  auto packed = AppendLate(frozen, late);
  ASSERT_FALSE(packed.has_value());
  EXPECT_EQ(expired.writers_expired.size(), 1u);
  EXPECT_FALSE(expired.files_removed.empty());
  EXPECT_NE(packed.error().message().find("stoker gc"), std::string::npos)
      << packed.error().ToString();
  EXPECT_NE(packed.error().message().find("nothing was published"), std::string::npos);
  ExpectNewestIntact();
}

// While no version was ever removed, no unreferenced file was ever published, so no reader can
// need one: what a killed pack left goes at the first gc, not a day later; a writer at work
// still keeps its files.
TEST_F(GcTest, WhileNoVersionWasRemovedLeftoversGoAtOnce) {
  store_->SetContents("chunks/00000000000000aa.chunk", "a killed pack's");
  store_->SetContents("segments/00000000000000bb.seg", "a killed pack's");
  auto lease = WriterLease::Take(*store_, kNoBeat).value();
  store_->SetContents("chunks/00000000000000cc.chunk", "a writer at work");
  const GcSummary held = Gc(kT0, 3);
  EXPECT_EQ(held.files_removed.size(), 0u);  // all three first seen while the lease was live
  lease.reset();
  store_->SetContents("chunks/00000000000000dd.chunk", "another killed pack's");
  const GcSummary s = Gc(kT0 + 1, 3);
  EXPECT_EQ(
      std::set<std::string>(s.files_removed.begin(), s.files_removed.end()),
      (std::set<std::string>{"chunks/00000000000000aa.chunk", "chunks/00000000000000cc.chunk",
                             "chunks/00000000000000dd.chunk", "segments/00000000000000bb.seg"}));
  EXPECT_EQ(s.files_never_published, 4u);
  ExpectNewestIntact();
}

// A closed job's parts (attempts no commit will publish) and then its marker go like any
// unreferenced file; an open job's parts and their chunks stay.
TEST_F(GcTest, AClosedJobsFilesGoAndAnOpenJobsStay) {
  for (const char* job : {"parts/ray-1", "parts/ray-2", "parts/open"}) {
    ASSERT_TRUE(store_->CreateDirs(job).ok());
  }
  store_->SetContents("parts/ray-1/closed", "committed\n");
  store_->SetContents("parts/ray-2/closed", "discarded\n");
  store_->SetContents("parts/ray-2/part-000007-of-000000.seg", "an attempt nobody committed");
  store_->SetContents("parts/open/part-000001-of-000002.seg", "not a segment: kept as is");
  const GcSummary s = Gc(kT0, 3);
  EXPECT_EQ(std::set<std::string>(s.files_removed.begin(), s.files_removed.end()),
            (std::set<std::string>{"parts/ray-1/closed", "parts/ray-2/part-000007-of-000000.seg"}));
  EXPECT_TRUE(store_->Exists("parts/ray-2/closed").value());  // until its job is empty
  EXPECT_TRUE(store_->Exists("parts/open/part-000001-of-000002.seg").value());
  EXPECT_EQ(Gc(kT0 + 1, 3).files_removed, std::vector<std::string>{"parts/ray-2/closed"});
  ExpectNewestIntact();
}

// A lease naming a process of this machine that is gone (a pack killed with -9) is removed at
// once, not after the writer timeout; one naming another machine waits for the timeout.
TEST_F(GcTest, ALeaseWhoseProcessIsGoneGoesAtOnce) {
  RemoveVersionOne();
  const LeaseHolder me = ThisProcess();
  ASSERT_GT(me.start, 0u);
  const auto lease_text = [&](const std::string& host, uint64_t start) {
    return fmt::format("stoker-writer 1\nbeat 3\nhost {}\nboot {}\npidns {}\npid {}\nstart {}\n",
                       host, me.boot, me.pid_namespace, me.pid, start);
  };
  const std::string gone = LeasePath(0xdead), elsewhere = LeasePath(0xfa2);
  store_->SetContents(gone, lease_text(me.host, me.start + 1));  // our pid, another process
  store_->SetContents(elsewhere, lease_text(me.host + "-elsewhere", me.start + 1));
  store_->SetContents("chunks/00000000000000aa.chunk", "the dead writer's");
  EXPECT_TRUE(HolderIsGone(ParseLeaseHolder(lease_text(me.host, me.start + 1)).value()));
  EXPECT_FALSE(HolderIsGone(ParseLeaseHolder(lease_text(me.host, me.start)).value()));
  EXPECT_FALSE(ParseLeaseHolder("stoker-writer 1\nbeat 3\n").has_value());  // older writers
  const GcSummary s = Gc(kT0, 3, false, kNoGrace);
  ASSERT_EQ(s.writers_gone.size(), 1u);
  EXPECT_EQ(s.writers_gone[0].first, 0xdeadu);
  EXPECT_EQ(s.writers_gone[0].second, fmt::format("pid {} on {}, gone", me.pid, me.host));
  EXPECT_FALSE(store_->Exists(gone).value());
  EXPECT_TRUE(store_->Exists(elsewhere).value());
  EXPECT_EQ(s.writers_active, 1u);
  EXPECT_EQ(s.files_held_for_writers, 1u);  // for the writer elsewhere, which may be at work
}

// A directory whose first pack never published (interrupted, killed) holds chunks and leases but
// no version: gc cleans it; a directory with nothing of a dataset is no dataset.
TEST(Gc, ANeverPublishedDirectoryIsCleaned) {
  storage::MemoryStorage store;
  ASSERT_TRUE(store.CreateDirs("chunks").ok());
  store.SetContents("chunks/00000000000000aa.chunk", "an interrupted first pack's");
  GcOptions o;
  o.now_unix_seconds = kT0;
  auto s = CollectGarbage(store, o);
  ASSERT_TRUE(s.has_value()) << s.error().ToString();
  EXPECT_EQ(s->files_removed, std::vector<std::string>{"chunks/00000000000000aa.chunk"});
  EXPECT_EQ(s->files_never_published, 1u);
  storage::MemoryStorage empty;
  empty.SetContents("notes.txt", "not a dataset");
  EXPECT_TRUE(CollectGarbage(empty, o).error().IsNotFound());
}

}  // namespace
}  // namespace stoker::dataset
