// `stoker pack --part K/N` and `stoker commit`: N writers' parts become one version, the same
// as one pack of their union; a missing, doubled, clashing or damaged part publishes nothing.
#include <gtest/gtest.h>

#include <cstdlib>

#include "dataset/gc.h"
#include "dataset/packer.h"
#include "dataset/parts.h"
#include "dataset/verify.h"
#include "dataset/version_view.h"
#include "format/versions.h"
#include "stoker/dataset.h"
#include "storage/memory_storage.h"
#include "testing/test_util.h"

namespace stoker::dataset {
namespace {

using test::AsString;

constexpr uint32_t kParts = 3;

class PartsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    all_ = test::RandomTree(
        7, {.files = 60, .dirs = 8, .max_file_bytes = 4000, .image_folder = true, .classes = 5});
    // Files go to parts round-robin: every part sees some classes, none sees all in order.
    uint32_t i = 0;
    for (const auto& [path, bytes] : all_.files) parts_[i++ % kParts].files[path] = bytes;
  }
  Result<PackSummary> PackPart(uint32_t k, const test::Tree& tree, uint32_t n = kParts) {
    PackOptions o;
    o.chunk_bytes = 4096;
    o.part = PartSpec{"job1", k, n};
    return Pack(*test::TreeSource(tree), *store_, o);
  }
  Result<PackSummary> CommitJob(uint32_t parts = 0) {
    CommitOptions o;
    o.job = "job1";
    o.parts = parts;
    return Commit(*store_, o);
  }

  std::shared_ptr<storage::MemoryStorage> store_ = std::make_shared<storage::MemoryStorage>();
  test::Tree all_;
  test::Tree parts_[kParts];
};

TEST_F(PartsTest, CommittedPartsEqualOnePackOfTheirUnion) {
  for (uint32_t k : {2u, 0u, 1u}) {  // any order, as on a cluster
    auto s = PackPart(k, parts_[k]);
    ASSERT_TRUE(s.has_value()) << s.error().ToString();
    EXPECT_EQ(s->version, 0u);  // nothing published by a part
  }
  EXPECT_TRUE(Dataset::Open(store_).error().IsNotFound());
  auto committed = CommitJob();
  ASSERT_TRUE(committed.has_value()) << committed.error().ToString();
  EXPECT_EQ(committed->version, 1u);
  EXPECT_EQ(committed->files_total, all_.files.size());

  auto single = std::make_shared<storage::MemoryStorage>();
  PackOptions o;
  o.chunk_bytes = 4096;
  ASSERT_TRUE(Pack(*test::TreeSource(all_), *single, o).has_value());
  auto want = Dataset::Open(single).value();
  auto got = Dataset::Open(store_).value();
  ASSERT_EQ(got->file_count(), want->file_count());
  ASSERT_EQ(got->class_count(), want->class_count());
  for (uint32_t k = 0; k < got->class_count(); ++k)
    EXPECT_EQ(got->ClassName(k), want->ClassName(k));
  for (uint32_t f = 0; f < got->file_count(); ++f) {
    const FileInfo g = got->Stat(f).value(), w = want->Stat(f).value();
    EXPECT_EQ(g.path, w.path);
    EXPECT_EQ(g.label, w.label) << g.path;
    EXPECT_EQ(AsString(got->ReadFile(f).value()), all_.files.at(g.path));
  }
  EXPECT_TRUE(store_->List("parts/job1").value().empty());  // spent
  EXPECT_TRUE(Verify(*store_).value().ok());
  EXPECT_TRUE(CommitJob().error().IsNotFound());  // a second commit finds nothing to publish
}

TEST_F(PartsTest, AMissingPartPublishesNothing) {
  ASSERT_TRUE(PackPart(0, parts_[0]).has_value());
  ASSERT_TRUE(PackPart(2, parts_[2]).has_value());
  auto c = CommitJob();
  ASSERT_FALSE(c.has_value());
  EXPECT_TRUE(c.error().IsNotFound());
  EXPECT_NE(c.error().message().find("part 1 of 3"), std::string::npos) << c.error().ToString();
  EXPECT_TRUE(format::ListVersions(*store_).value().empty());
  ASSERT_TRUE(PackPart(1, parts_[1]).has_value());  // the late writer arrives: now it commits
  EXPECT_TRUE(CommitJob().has_value());
}

TEST_F(PartsTest, APartWrittenTwiceIsRefusedAndLeavesNoChunks) {
  ASSERT_TRUE(PackPart(0, parts_[0]).has_value());
  const size_t chunks = store_->List("chunks").value().size();
  auto again = PackPart(0, parts_[0]);
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(again.error().message().find("packed twice"), std::string::npos);
  EXPECT_EQ(store_->List("chunks").value().size(), chunks);
}

// K/N and a bare K (N unknown) are the same part: the second is refused when it is written,
// and a commit that meets both (written around that check) names both and publishes nothing.
TEST_F(PartsTest, ThePartUnderAnotherCountIsThePartPackedTwice) {
  ASSERT_TRUE(PackPart(1, parts_[1]).has_value());
  auto again = PackPart(1, parts_[2], /*n=*/0);
  ASSERT_FALSE(again.has_value());
  EXPECT_NE(again.error().message().find("packed twice"), std::string::npos);
  ASSERT_TRUE(PackPart(0, parts_[0]).has_value());
  ASSERT_TRUE(PackPart(2, parts_[2]).has_value());
  // A copy of part 1 under N = 0, as a racing writer could leave it.
  const std::string first = "parts/job1/part-000001-of-000003.seg";
  const std::string copy = "parts/job1/part-000001-of-000000.seg";
  auto bytes = store_->Map(first);
  ASSERT_TRUE(bytes.has_value());
  ASSERT_TRUE(store_->CreateExclusive(copy, (*bytes)->bytes()).ok());
  auto committed = CommitJob();
  ASSERT_FALSE(committed.has_value());
  EXPECT_NE(committed.error().message().find("are both part 1 of job 'job1'"), std::string::npos)
      << committed.error().ToString();
  EXPECT_FALSE(store_->Exists("versions/0000000000000001.version").value());
}

// Ray and Spark retry a task: each attempt writes a part of its own, the engine commits the
// attempts it accepted, and an attempt that outlives the commit is refused, leaving nothing.
TEST_F(PartsTest, AnEngineCommitsTheAttemptsItAcceptedAndRefusesLaterOnes) {
  ASSERT_TRUE(PackPart(10, parts_[0], 0).has_value());  // task 0's first attempt (it died)
  ASSERT_TRUE(PackPart(11, parts_[0], 0).has_value());  // task 0's retry: the same files
  ASSERT_TRUE(PackPart(20, parts_[1], 0).has_value());
  ASSERT_TRUE(PackPart(30, parts_[2], 0).has_value());
  CommitOptions o;
  o.job = "job1";
  o.only = {30, 11, 20};
  auto committed = Commit(*store_, o);
  ASSERT_TRUE(committed.has_value()) << committed.error().ToString();
  EXPECT_EQ(committed->files_total, all_.files.size());  // every file once
  auto ds = Dataset::Open(store_).value();
  for (uint32_t f = 0; f < ds->file_count(); ++f) {
    const FileInfo info = ds->Stat(f).value();
    EXPECT_EQ(AsString(ds->ReadFile(f).value()), all_.files.at(info.path));
  }
  // The died attempt's part went with the others; the job stays closed.
  EXPECT_EQ(store_->List("parts/job1").value(), std::vector<std::string>{"closed"});
  const size_t chunks = store_->List("chunks").value().size();
  auto late = PackPart(12, parts_[0], 0);
  ASSERT_FALSE(late.has_value());
  EXPECT_EQ(late.error().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(late.error().message().find("already committed"), std::string::npos)
      << late.error().ToString();
  EXPECT_EQ(store_->List("chunks").value().size(), chunks);
  EXPECT_EQ(store_->List("parts/job1").value(), std::vector<std::string>{"closed"});
  auto again = Commit(*store_, o);
  ASSERT_FALSE(again.has_value());
  EXPECT_NE(again.error().message().find("published once"), std::string::npos);
  EXPECT_EQ(format::ListVersions(*store_).value().size(), 1u);
}

TEST_F(PartsTest, AListedPartThatIsMissingPublishesNothing) {
  ASSERT_TRUE(PackPart(10, parts_[0], 0).has_value());
  CommitOptions o;
  o.job = "job1";
  o.only = {10, 11};
  auto c = Commit(*store_, o);
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(c.error().message().find("part 11 of job 'job1' is missing"), std::string::npos)
      << c.error().ToString();
  EXPECT_TRUE(format::ListVersions(*store_).value().empty());
  ASSERT_TRUE(PackPart(11, parts_[1], 0).has_value());  // not closed: the commit failed
  EXPECT_TRUE(Commit(*store_, o).has_value());
}

TEST_F(PartsTest, ADiscardedJobPublishesNothingAndRefusesLaterParts) {
  ASSERT_TRUE(PackPart(0, parts_[0]).has_value());
  auto discarded = DiscardParts(*store_, "job1");
  ASSERT_TRUE(discarded.has_value()) << discarded.error().ToString();
  EXPECT_EQ(discarded->parts_removed, 1u);
  EXPECT_FALSE(discarded->already_closed);
  EXPECT_EQ(store_->List("parts/job1").value(), std::vector<std::string>{"closed"});
  EXPECT_FALSE(PackPart(1, parts_[1]).has_value());
  EXPECT_FALSE(CommitJob().has_value());
  EXPECT_TRUE(format::ListVersions(*store_).value().empty());
  EXPECT_TRUE(DiscardParts(*store_, "job1").value().already_closed);  // twice: nothing done
  EXPECT_TRUE(DiscardParts(*store_, "job2").error().IsNotFound());    // a job never written
}

TEST_F(PartsTest, AJobCommittedWholeCanNameTheNextParts) {
  for (uint32_t k = 0; k < kParts; ++k) ASSERT_TRUE(PackPart(k, parts_[k]).has_value());
  ASSERT_TRUE(CommitJob().has_value());
  auto more = test::RandomTree(
      8, {.files = 5, .dirs = 2, .max_file_bytes = 100, .image_folder = true, .classes = 2});
  PackOptions o;
  o.part = PartSpec{"job1", 0, 1};
  ASSERT_TRUE(Pack(*test::TreeSource(more), *store_, o).has_value());
  auto second = CommitJob();
  ASSERT_TRUE(second.has_value()) << second.error().ToString();
  EXPECT_EQ(second->version, 2u);
}

TEST_F(PartsTest, APathInTwoPartsIsNamedWithBoth) {
  test::Tree clash = parts_[1];
  clash.files[parts_[0].files.begin()->first] = "again";
  ASSERT_TRUE(PackPart(0, parts_[0], 2).has_value());
  ASSERT_TRUE(PackPart(1, clash, 2).has_value());
  auto c = CommitJob();
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(
      c.error().message().find(parts_[0].files.begin()->first + " is in part 0 and in part 1"),
      std::string::npos)
      << c.error().ToString();
  EXPECT_TRUE(format::ListVersions(*store_).value().empty());
}

TEST_F(PartsTest, ADamagedPartIsNamed) {
  for (uint32_t k = 0; k < kParts; ++k) ASSERT_TRUE(PackPart(k, parts_[k]).has_value());
  const std::string path = PartPath({"job1", 1, kParts});
  std::string bytes = store_->GetContents(path).value();
  bytes[bytes.size() / 2] ^= 0x20;
  store_->SetContents(path, bytes);
  auto c = CommitJob();
  ASSERT_FALSE(c.has_value());
  EXPECT_TRUE(c.error().IsCorruption()) << c.error().ToString();
  EXPECT_NE(c.error().message().find(path), std::string::npos) << c.error().ToString();
}

// A part's schema file that is not a schema as a writer writes it (here: a newline after it)
// would publish a record no reader opens: refused, naming the file, nothing published.
TEST_F(PartsTest, ADamagedPartSchemaIsNamedAndPublishesNothing) {
  for (uint32_t k = 0; k < kParts; ++k) ASSERT_TRUE(PackPart(k, parts_[k]).has_value());
  std::string schema = PartPath({"job1", 1, kParts});
  schema.replace(schema.size() - std::string_view(".seg").size(), std::string::npos, ".columns");
  store_->SetContents(schema, "x:int\n");
  auto c = CommitJob();
  ASSERT_FALSE(c.has_value());
  EXPECT_TRUE(c.error().IsCorruption()) << c.error().ToString();
  EXPECT_NE(c.error().message().find(schema), std::string::npos) << c.error().ToString();
  EXPECT_TRUE(format::ListVersions(*store_).value().empty());
}

TEST_F(PartsTest, ACommitOntoADatasetAppendsAndGcKeepsUncommittedParts) {
  test::Tree first;
  first.files["zz-first/a"] = "a";
  PackOptions o;
  ASSERT_TRUE(Pack(*test::TreeSource(first), *store_, o).has_value());
  for (uint32_t k = 0; k < kParts; ++k) ASSERT_TRUE(PackPart(k, parts_[k], 0).has_value());
  // Uncommitted parts' chunks are a version to come: gc with no grace keeps them.
  GcOptions gc;
  gc.grace = std::chrono::seconds(0);
  const GcSummary kept = CollectGarbage(*store_, gc).value();
  // ... and says which job they wait for, so that an operator can commit or discard it.
  ASSERT_EQ(kept.open_jobs.size(), 1u);
  EXPECT_EQ(kept.open_jobs[0].job, "job1");
  EXPECT_EQ(kept.open_jobs[0].parts, kParts);
  EXPECT_GE(kept.open_jobs[0].chunks, kParts);
  EXPECT_EQ(kept.open_jobs[0].count, 0u);                // written without N
  EXPECT_TRUE(CommitJob().error().IsInvalidArgument());  // N unknown
  auto c = CommitJob(kParts);
  ASSERT_TRUE(c.has_value()) << c.error().ToString();
  EXPECT_EQ(c->version, 2u);
  auto ds = Dataset::Open(store_).value();
  EXPECT_EQ(ds->Stat(ds->Find("zz-first/a").value())->label, 0);  // the old class keeps label 0
  for (const auto& [path, bytes] : all_.files) {
    EXPECT_EQ(AsString(ds->ReadFile(ds->Find(path).value()).value()), bytes);
  }
  EXPECT_TRUE(Verify(*store_).value().ok());
}

TEST(PartFromEnvironment, SlurmArraysAndIndexedJobs) {
  ::setenv("SLURM_ARRAY_TASK_ID", "7", 1);
  ::setenv("SLURM_ARRAY_TASK_MIN", "5", 1);
  ::setenv("SLURM_ARRAY_TASK_COUNT", "4", 1);
  ::setenv("SLURM_ARRAY_JOB_ID", "991", 1);
  auto slurm = PartFromEnvironment().value();
  EXPECT_EQ(slurm.index, 2u);
  EXPECT_EQ(slurm.count, 4u);
  EXPECT_EQ(slurm.job, "slurm-991");
  // --array=5-11:3 runs tasks 5, 8, 11: part 1 of 3 is task 8.
  ::setenv("SLURM_ARRAY_TASK_STEP", "3", 1);
  ::setenv("SLURM_ARRAY_TASK_ID", "8", 1);
  ::setenv("SLURM_ARRAY_TASK_COUNT", "3", 1);
  EXPECT_EQ(PartFromEnvironment().value().index, 1u);
  ::setenv("SLURM_ARRAY_TASK_ID", "7", 1);  // not on the step: a list, not a range
  EXPECT_EQ(PartFromEnvironment().error().code(), StatusCode::kInvalidArgument);
  for (const char* v : {"SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_COUNT",
                        "SLURM_ARRAY_TASK_STEP", "SLURM_ARRAY_JOB_ID"}) {
    ::unsetenv(v);
  }
  EXPECT_TRUE(PartFromEnvironment().error().IsNotFound());
  ::setenv("JOB_COMPLETION_INDEX", "3", 1);
  auto k8s = PartFromEnvironment().value();
  EXPECT_EQ(k8s.index, 3u);
  EXPECT_EQ(k8s.count, 0u);
  ::unsetenv("JOB_COMPLETION_INDEX");
  EXPECT_FALSE(ValidateJobName("../x").ok());
  EXPECT_TRUE(ValidateJobName("slurm-991").ok());
}

// WebDataset shards split between parts may split a sample: its image in the last shard of
// part 0, its .cls in the first of part 1. Committed, it is one sample with the label on every
// file, as one pack of all the shards makes it.
TEST(PartsOfShards, ASampleSplitAcrossPartsIsOneSampleWithOneLabel) {
  test::TempDir dir;
  const std::string a = dir.path() + "/a.tar", b = dir.path() + "/b.tar";
  test::WriteTar(
      a, {test::File("s1.jpg", "one"), test::File("s1.cls", "3"), test::File("s2.jpg", "two")});
  test::WriteTar(
      b, {test::File("s2.cls", "5"), test::File("s3.jpg", "three"), test::File("s3.cls", "1")});
  auto parts = std::make_shared<storage::MemoryStorage>();
  for (uint32_t k = 0; k < 2; ++k) {
    PackOptions o;
    o.part = PartSpec{"shards", k, 2};
    ASSERT_TRUE(test::PackTars({k == 0 ? a : b}, *parts, o).has_value());
  }
  CommitOptions c;
  c.job = "shards";
  auto committed = Commit(*parts, c);
  ASSERT_TRUE(committed.has_value()) << committed.error().ToString();
  auto whole = std::make_shared<storage::MemoryStorage>();
  ASSERT_TRUE(test::PackTars({a, b}, *whole).has_value());

  for (const auto& store : {parts, whole}) {
    auto ds = Dataset::Open(store).value();
    ASSERT_EQ(ds->sample_count(), 3u);
    const uint64_t s2_jpg = ds->Find("s2.jpg").value();
    const uint64_t s2_cls = ds->Find("s2.cls").value();
    EXPECT_EQ(ds->Stat(s2_jpg).value().label, ds->Stat(s2_cls).value().label);
    EXPECT_EQ(ds->ClassName(static_cast<uint32_t>(ds->Stat(s2_jpg).value().label)), "5");
  }
}

}  // namespace
}  // namespace stoker::dataset
