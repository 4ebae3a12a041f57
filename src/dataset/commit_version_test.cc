// The one publish loop: a writer that loses the version number to another rebases on the newer
// version and publishes the next one; a writer whose preparation refuses, or whose lease gc
// took, publishes nothing and drops what it wrote.
#include "dataset/commit_version.h"

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "format/versions.h"
#include "storage/memory_storage.h"

namespace stoker::dataset {
namespace {

using namespace std::chrono_literals;

format::VersionRecord On(const std::optional<format::VersionRecord>& latest, uint64_t writer) {
  format::VersionRecord r = latest.value_or(format::VersionRecord{});
  r.version = latest ? latest->version + 1 : 1;
  r.parent = latest ? latest->version : 0;
  r.writer = writer;
  return r;
}

TEST(CommitVersion, ALostRaceRebasesOnTheNewerVersion) {
  storage::MemoryStorage store;
  auto lease = WriterLease::Take(store).value();
  std::vector<std::string> calls;
  VersionCommit commit;
  commit.prepare = [&](const std::optional<format::VersionRecord>& latest,
                       int attempt) -> Result<format::VersionRecord> {
    calls.push_back("prepare " + std::to_string(attempt) + " on " +
                    std::to_string(latest ? latest->version : 0));
    // Another writer takes version 1 while this one prepares it (only the first time).
    if (attempt == 1) {
      EXPECT_TRUE(format::PublishVersionRecord(store, On(latest, 7)).ok());
    }
    return On(latest, lease->writer());
  };
  commit.abandon = [&](bool final) { calls.push_back(final ? "abandon final" : "abandon"); };
  auto committed = CommitVersion(store, *lease, commit);
  ASSERT_TRUE(committed.has_value()) << committed.error().ToString();
  EXPECT_EQ(committed->attempts, 2);
  EXPECT_EQ(committed->record.version, 2u);
  EXPECT_EQ(calls, (std::vector<std::string>{"prepare 1 on 0", "abandon", "prepare 2 on 1"}));
  const auto latest = format::ReadLatestVersion(store).value();
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->version, 2u);  // NOLINT(bugprone-unchecked-optional-access): asserted above
  EXPECT_EQ(latest->writer, lease->writer());  // NOLINT(bugprone-unchecked-optional-access)
  EXPECT_EQ(format::ReadVersion(store, 1).value().writer, 7u);  // the winner's stays
}

TEST(CommitVersion, APreparationsErrorPublishesNothingAndDropsWhatItWrote) {
  storage::MemoryStorage store;
  auto lease = WriterLease::Take(store).value();
  int abandoned_final = 0;
  VersionCommit commit;
  commit.prepare = [&](const std::optional<format::VersionRecord>&,
                       int) -> Result<format::VersionRecord> {
    return Err(Status::InvalidArgument("the paths are already in the dataset"));
  };
  commit.abandon = [&](bool final) { abandoned_final += final; };
  auto committed = CommitVersion(store, *lease, commit);
  ASSERT_FALSE(committed.has_value());
  EXPECT_EQ(committed.error().code(), StatusCode::kInvalidArgument) << committed.error().ToString();
  EXPECT_EQ(abandoned_final, 1);
  EXPECT_FALSE(format::ReadLatestVersion(store).value());
}

TEST(CommitVersion, AWriterWhoseLeaseGcTookPublishesNothing) {
  storage::MemoryStorage store;
  auto lease = WriterLease::Take(store).value();
  int abandoned_final = 0;
  VersionCommit commit;
  commit.prepare = [&](const std::optional<format::VersionRecord>& latest,
                       int) -> Result<format::VersionRecord> {
    EXPECT_TRUE(store.Remove(lease->path()).ok());  // gc expires the lease meanwhile
    return On(latest, lease->writer());
  };
  commit.abandon = [&](bool final) { abandoned_final += final; };
  auto committed = CommitVersion(store, *lease, commit);
  ASSERT_FALSE(committed.has_value());
  EXPECT_TRUE(committed.error().IsNotFound()) << committed.error().ToString();
  EXPECT_EQ(abandoned_final, 1);
  EXPECT_FALSE(format::ReadLatestVersion(store).value());
}

}  // namespace
}  // namespace stoker::dataset
