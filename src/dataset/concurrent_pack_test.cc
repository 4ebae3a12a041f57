// Several writers packing into one dataset at the same moment (docs/format.md §5): every
// append lands in a version of its own, no file is lost or renumbered, a class that two writers
// introduce gets one label, and the loser of a fresh-pack race leaves nothing behind.
#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <map>
#include <set>
#include <thread>

#include "dataset/packer.h"
#include "dataset/verify.h"
#include "dataset/version_view.h"
#include "format/version_record.h"
#include "stoker/dataset.h"
#include "storage/fault_storage.h"
#include "storage/forwarding_storage.h"
#include "storage/memory_storage.h"
#include "storage/posix_storage.h"
#include "testing/test_util.h"

namespace stoker::dataset {
namespace {

using test::AsString;

constexpr int kWriters = 6;

// Writer w's files: its own class, a class every writer shares ("shared", new to the dataset),
// and a file in the base's class "a".
test::Tree WriterTree(int w) {
  test::Tree t;
  for (int i = 0; i < 5; ++i) {
    t.files["own" + std::to_string(w) + "/f" + std::to_string(i)] =
        test::RandomBytes(100 * w + i, 500 + 300 * i);
  }
  t.files["shared/w" + std::to_string(w)] = test::RandomBytes(1000 + w, 2000);
  t.files["a/from-writer-" + std::to_string(w)] = test::RandomBytes(2000 + w, 100);
  return t;
}

// Holds each writer's first attempt to publish until every writer has reached it, so that all
// of them race for the same version (without it, fast writers may simply take turns).
class StartingLine : public storage::ForwardingStorage {
 public:
  StartingLine(std::shared_ptr<Storage> base, std::barrier<>* line)
      : ForwardingStorage(std::move(base)), line_(line) {}
  Status CreateExclusive(std::string_view path, std::span<const std::byte> bytes) override {
    if (path.starts_with("versions/") && !crossed_) {
      crossed_ = true;
      line_->arrive_and_wait();
    }
    return ForwardingStorage::CreateExclusive(path, bytes);
  }

 private:
  std::barrier<>* line_;
  bool crossed_ = false;  // one writer per instance
};

struct Params {
  bool posix = false;
  double lost_replies = 0;  // on version records: the writer must resolve each by reading back
};

class ConcurrentPackTest : public ::testing::TestWithParam<Params> {
 protected:
  std::shared_ptr<Storage> Store() {
    if (GetParam().posix) return storage::NewPosixStorage(dir_.path());
    return memory_;
  }
  test::TempDir dir_;
  std::shared_ptr<storage::MemoryStorage> memory_ = std::make_shared<storage::MemoryStorage>();
};

TEST_P(ConcurrentPackTest, EveryAppendLandsInAVersionOfItsOwn) {
  auto store = Store();
  test::Tree base;
  base.files["a/0"] = "zero";
  base.files["b/1"] = "one";
  PackOptions options;
  options.chunk_bytes = 4096;
  ASSERT_TRUE(Pack(*test::TreeSource(base), *store, options).has_value());

  options.append = true;
  std::vector<Result<PackSummary>> results(kWriters, Err(Status::Internal("not run")));
  std::barrier<> line(kWriters);
  std::atomic<uint64_t> lost{0};
  std::vector<std::thread> writers;
  writers.reserve(kWriters);
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      storage::FaultOptions faults;
      faults.path_filter = "versions/";
      faults.lost_reply_probability = GetParam().lost_replies;
      faults.seed = 77 + w;
      auto faulty = std::make_shared<storage::FaultStorage>(
          std::make_shared<StartingLine>(store, &line), faults);
      const test::Tree tree = WriterTree(w);  // TreeSource reads it in place
      auto source = test::TreeSource(tree);
      results[w] = Pack(*source, *faulty, options);
      lost += faulty->counters().lost_replies;
    });
  }
  for (auto& t : writers) t.join();
  if (GetParam().lost_replies > 0) {
    EXPECT_GT(lost.load(), 0u);
  }

  std::set<uint64_t> versions;
  int rebased = 0;
  for (int w = 0; w < kWriters; ++w) {
    ASSERT_TRUE(results[w].has_value()) << w << ": " << results[w].error().ToString();
    versions.insert(results[w]->version);
    rebased += results[w]->publish_attempts > 1;
  }
  EXPECT_EQ(versions.size(), size_t{kWriters});  // each writer its own version
  EXPECT_EQ(*versions.begin(), 2u);
  EXPECT_EQ(*versions.rbegin(), 1u + kWriters);
  EXPECT_EQ(rebased, kWriters - 1);  // all raced for version 2: one won, the others rebased

  auto ds = Dataset::Open(store).value();
  EXPECT_EQ(ds->version(), 1u + kWriters);
  // Classes: a, b from the base, then each writer's own class and "shared" exactly once.
  EXPECT_EQ(ds->class_count(), 2u + kWriters + 1);
  std::map<std::string, int32_t> label_of;
  for (uint32_t k = 0; k < ds->class_count(); ++k) {
    EXPECT_TRUE(label_of.emplace(std::string(ds->ClassName(k)), k).second) << ds->ClassName(k);
  }
  EXPECT_EQ(label_of.at("a"), 0);
  EXPECT_EQ(label_of.at("b"), 1);
  size_t files = base.files.size();
  for (int w = 0; w < kWriters; ++w) {
    for (const auto& [path, bytes] : WriterTree(w).files) {
      auto index = ds->Find(path);
      ASSERT_TRUE(index.has_value()) << path << ": " << index.error().ToString();
      EXPECT_EQ(AsString(ds->ReadFile(*index).value()), bytes) << path;
      EXPECT_EQ(ds->Stat(*index)->label, label_of.at(path.substr(0, path.find('/')))) << path;
      ++files;
    }
  }
  EXPECT_EQ(ds->file_count(), files);
  // Each version extends its parent by exactly one writer's files, which keep their indices.
  for (uint64_t v = 2; v <= 1u + kWriters; ++v) {
    DatasetOpenOptions at;
    at.version = v;
    auto older = Dataset::Open(store, at).value();
    EXPECT_EQ(older->file_count(), base.files.size() + (v - 1) * WriterTree(0).files.size());
    for (uint32_t f = 0; f < older->file_count(); ++f) {
      EXPECT_EQ(older->FilePath(f), ds->FilePath(f)) << "version " << v << " file " << f;
    }
  }
  auto report = Verify(*store).value();
  EXPECT_TRUE(report.ok());
  EXPECT_EQ(report.files_checked, files);
}

INSTANTIATE_TEST_SUITE_P(Stores, ConcurrentPackTest,
                         ::testing::Values(Params{false, 0}, Params{true, 0}, Params{true, 0.5},
                                           Params{false, 0.5}),
                         [](const auto& p) {
                           return std::string(p.param.posix ? "Posix" : "Memory") +
                                  (p.param.lost_replies > 0 ? "LostReplies" : "");
                         });

TEST(ConcurrentFreshPack, OneWinsAndTheOtherLeavesNothing) {
  test::TempDir dir;
  for (auto store : {std::shared_ptr<Storage>(std::make_shared<storage::MemoryStorage>()),
                     storage::NewPosixStorage(dir.path())}) {
    PackOptions options;
    options.chunk_bytes = 4096;
    std::vector<Result<PackSummary>> results(2, Err(Status::Internal("not run")));
    std::barrier<> line(2);  // both get past the fresh-destination check and race to publish
    std::vector<std::thread> writers;
    writers.reserve(2);
    for (int w = 0; w < 2; ++w) {
      writers.emplace_back([&, w] {
        const test::Tree tree = WriterTree(w);  // TreeSource reads it in place
        auto source = test::TreeSource(tree);
        StartingLine racing(store, &line);
        results[w] = Pack(*source, racing, options);
      });
    }
    for (auto& t : writers) t.join();
    const int winner = results[0].has_value() ? 0 : 1;
    ASSERT_TRUE(results[winner].has_value()) << results[winner].error().ToString();
    const auto& loser = results[1 - winner];
    ASSERT_FALSE(loser.has_value()) << "both fresh packs claim version 1";
    EXPECT_EQ(loser.error().code(), StatusCode::kAlreadyExists) << loser.error().ToString();
    EXPECT_NE(loser.error().message().find("at the same time"), std::string::npos)
        << loser.error().ToString();
    // Only the winner's chunks and segment remain.
    auto ds = Dataset::Open(store).value();
    EXPECT_EQ(ds->file_count(), WriterTree(winner).files.size());
    EXPECT_EQ(store->List("chunks").value().size(), dataset::ViewOf(*ds).chunk_count());
    EXPECT_EQ(store->List("segments").value().size(), 1u);
  }
}

}  // namespace
}  // namespace stoker::dataset
