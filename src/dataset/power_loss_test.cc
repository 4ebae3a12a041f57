// Power loss at every step of every writer: `pack`, `pack --append`, `compact`, `commit` and
// `gc` are stopped after each of their storage mutations in turn, everything not made durable
// (bytes after a file's last Sync, names since their directory's last sync) is dropped, and the
// dataset must then read and verify as the previous version or, whole, as the new one. gc and a
// new writer must work on what is left. (A `kill -9` keeps the page cache, so only this catches
// a missing Sync or directory sync; storage/power_loss_storage.h says what is durable.)
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "dataset/compact.h"
#include "dataset/gc.h"
#include "dataset/packer.h"
#include "dataset/parts.h"
#include "dataset/verify.h"
#include "format/versions.h"
#include "stoker/dataset.h"
#include "storage/power_loss_storage.h"
#include "testing/test_util.h"

namespace stoker::dataset {
namespace {

using storage::PowerLossStorage;
using Store = std::shared_ptr<PowerLossStorage>;

test::Tree Batch(int b, int files = 12) {
  test::Tree t;
  for (int i = 0; i < files; ++i) {
    t.files[fmt::format("c{}/{:02d}-{}.bin", i % 3, i, b)] = test::RandomBytes(97 * b + i, 700 + i);
  }
  return t;
}

PackOptions Options(bool append) {
  PackOptions o;
  o.chunk_bytes = 4096;  // a few chunks per batch
  o.append = append;
  return o;
}

Status PackBatch(Storage& store, int b, bool append) {
  auto packed = Pack(*test::TreeSource(Batch(b)), store, Options(append));
  return packed ? Status::OK() : packed.error();
}

// Every path and its bytes, in index order, of `version` (the newest if unset); or why it cannot
// be read.
using Contents = std::vector<std::pair<std::string, std::string>>;
Result<Contents> ReadAll(const Store& store, std::optional<uint64_t> version = std::nullopt) {
  STOKER_ASSIGN_OR_RETURN(auto ds, Dataset::Open(store, {.version = version}));
  Contents out;
  for (uint32_t i = 0; i < ds->file_count(); ++i) {
    STOKER_ASSIGN_OR_RETURN(const FileInfo info, ds->Stat(i));
    STOKER_ASSIGN_OR_RETURN(const auto bytes, ds->ReadFile(i));
    out.emplace_back(info.path, std::string(test::AsString(bytes)));
  }
  return out;
}

// The newest version after a crash: nullopt if none.
std::optional<uint64_t> Newest(PowerLossStorage& store) {
  auto latest = format::ReadLatestVersion(store);
  EXPECT_TRUE(latest.has_value()) << latest.error().ToString();
  if (!latest) return std::nullopt;
  const std::optional<format::VersionRecord>& newest = *latest;
  if (!newest) return std::nullopt;
  return newest->version;
}

struct Scenario {
  std::function<void(PowerLossStorage&)> setup;  // runs whole, durable
  std::function<Status(PowerLossStorage&)> run;  // the writer under test
};

// Runs the scenario once whole, then once per crash point: after power loss (`flushed`: see
// PowerLossStorage::PowerLoss) the newest version must be the one before (with its contents) or
// the one after (with its contents), every version listed must read whole, the newest verify
// clean and survive a gc; and a new writer must append to it.
void AtEveryCrashPoint(const Scenario& s, const std::function<bool(std::string_view)>& flushed) {
  auto before_store = std::make_shared<PowerLossStorage>();
  s.setup(*before_store);
  const std::optional<uint64_t> before_version = Newest(*before_store);
  std::optional<Contents> before;
  if (before_version) before = ReadAll(before_store).value();

  auto whole = std::make_shared<PowerLossStorage>();
  s.setup(*whole);
  const uint64_t start = whole->mutations();
  ASSERT_TRUE(s.run(*whole).ok());
  const uint64_t steps = whole->mutations() - start;
  whole->PowerLoss();  // what it made durable is all that counts
  const std::optional<uint64_t> after_version = Newest(*whole);
  ASSERT_TRUE(after_version) << "the writer published nothing durable";
  const Contents after = ReadAll(whole).value();
  ASSERT_GT(steps, 3u);

  for (uint64_t k = 0; k <= steps; ++k) {
    SCOPED_TRACE(fmt::format("power lost after {} of {} storage mutations", k, steps));
    auto store = std::make_shared<PowerLossStorage>();
    s.setup(*store);
    store->CrashAfter(k);
    (void)s.run(*store);
    store->PowerLoss(flushed);

    const std::optional<uint64_t> now = Newest(*store);
    if (now == before_version) {
      if (before) {
        auto seen = ReadAll(store);
        ASSERT_TRUE(seen.has_value()) << seen.error().ToString();
        EXPECT_EQ(*seen, *before);
      }
    } else {
      ASSERT_EQ(now, after_version);
      auto seen = ReadAll(store);
      ASSERT_TRUE(seen.has_value()) << seen.error().ToString();
      EXPECT_EQ(*seen, after);
    }
    if (now) {
      auto report = Verify(*store);
      ASSERT_TRUE(report.has_value()) << report.error().ToString();
      EXPECT_TRUE(report->ok()) << (report->problems.empty() ? "corrupt files or chunks"
                                                             : report->problems[0]);
      // Every version still listed reads whole: no record outlives a file it names.
      const std::vector<uint64_t> listed = format::ListVersions(*store).value();
      for (const uint64_t v : listed) {
        auto seen = ReadAll(store, v);
        EXPECT_TRUE(seen.has_value()) << "version " << v << ": " << seen.error().ToString();
      }
    }
    // What the crash left is collected (the dead writer's lease at once: writer_timeout 0),
    // and the dataset reads the same after. (Crashed before its first directory, a pack left
    // no dataset for gc to look at.)
    if (!store->Exists(format::kVersionsDir).value()) continue;
    GcOptions gc;
    gc.grace = std::chrono::seconds(0);
    gc.writer_timeout = std::chrono::seconds(0);
    auto collected = CollectGarbage(*store, gc);
    ASSERT_TRUE(collected.has_value()) << collected.error().ToString();
    if (now) {
      auto again = ReadAll(store);
      ASSERT_TRUE(again.has_value()) << "after gc: " << again.error().ToString();
      EXPECT_EQ(*again, now == before_version && before ? *before : after);
    }
    // A new writer carries on.
    EXPECT_TRUE(PackBatch(*store, 99, /*append=*/now.has_value()).ok());
    EXPECT_TRUE(Verify(*store).value().ok());
    if (::testing::Test::HasFailure()) return;  // the first crash point that fails says enough
  }
}

// Power-loss models: nothing unsynced survives; or the file directories' unsynced changes do
// (files created or removed there reached the disk) while versions/ and gc/ lost theirs.
const std::function<bool(std::string_view)> kFlushedFileDirs = [](std::string_view dir) {
  return dir == format::kChunksDir || dir == format::kSegmentsDir;
};

void AtEveryCrashPoint(const Scenario& s) {
  for (const bool flush_file_dirs : {false, true}) {
    SCOPED_TRACE(flush_file_dirs ? "chunks/ and segments/ flushed" : "nothing unsynced survives");
    AtEveryCrashPoint(s, flush_file_dirs ? kFlushedFileDirs : nullptr);
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(PowerLoss, PackPublishesAllOrNothing) {
  AtEveryCrashPoint({.setup = [](PowerLossStorage&) {},
                     .run = [](PowerLossStorage& s) { return PackBatch(s, 1, false); }});
}

TEST(PowerLoss, AppendKeepsThePreviousVersionOrPublishesTheNextWhole) {
  AtEveryCrashPoint({.setup = [](PowerLossStorage& s) { ASSERT_TRUE(PackBatch(s, 1, false).ok()); },
                     .run = [](PowerLossStorage& s) { return PackBatch(s, 2, true); }});
}

TEST(PowerLoss, CompactKeepsThePreviousVersionOrPublishesTheMergedOneWhole) {
  AtEveryCrashPoint({.setup =
                         [](PowerLossStorage& s) {
                           for (int b = 1; b <= 3; ++b) ASSERT_TRUE(PackBatch(s, b, b > 1).ok());
                         },
                     .run =
                         [](PowerLossStorage& s) {
                           CompactOptions o;
                           o.all = true;
                           auto compacted = Compact(s, o);
                           return compacted ? Status::OK() : compacted.error();
                         }});
}

TEST(PowerLoss, CommitOfPartsPublishesAllOrNothing) {
  AtEveryCrashPoint({.setup =
                         [](PowerLossStorage& s) {
                           ASSERT_TRUE(PackBatch(s, 1, false).ok());
                           for (uint32_t k = 0; k < 2; ++k) {
                             PackOptions o = Options(false);
                             o.part = PartSpec{"job", k, 2};
                             ASSERT_TRUE(Pack(*test::TreeSource(Batch(10 + k)), s, o).has_value());
                           }
                         },
                     .run =
                         [](PowerLossStorage& s) {
                           CommitOptions o;
                           o.job = "job";
                           auto committed = Commit(s, o);
                           return committed ? Status::OK() : committed.error();
                         }});
}

TEST(PowerLoss, GcNeverLeavesAVersionWhoseFilesAreGone) {
  AtEveryCrashPoint({.setup =
                         [](PowerLossStorage& s) {
                           for (int b = 1; b <= 3; ++b) ASSERT_TRUE(PackBatch(s, b, b > 1).ok());
                           CompactOptions o;
                           o.all = true;
                           ASSERT_TRUE(Compact(s, o).has_value());
                         },
                     .run =
                         [](PowerLossStorage& s) {
                           GcOptions o;
                           o.grace = std::chrono::seconds(0);
                           auto collected = CollectGarbage(s, o);
                           return collected ? Status::OK() : collected.error();
                         }});
}

}  // namespace
}  // namespace stoker::dataset
