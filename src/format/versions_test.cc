#include "format/versions.h"

#include <gtest/gtest.h>

#include <thread>

#include "storage/fault_storage.h"
#include "storage/forwarding_storage.h"
#include "storage/memory_storage.h"
#include "storage/posix_storage.h"
#include "testing/test_util.h"

namespace stoker::format {
namespace {

format::VersionRecord Record(uint64_t version, uint64_t writer) {
  format::VersionRecord r;
  r.version = version;
  r.parent = version - 1;
  r.writer = writer;
  r.segments = {{writer, 100, 0x1234, 10, 10, 1, 1}};
  r.files = r.samples = 10;
  r.classes = r.chunks = 1;
  return r;
}

TEST(Versions, PublishListAndReadBack) {
  auto storage = std::make_shared<storage::MemoryStorage>();
  EXPECT_TRUE(ListVersions(*storage).value().empty());
  EXPECT_FALSE(ReadLatestVersion(*storage).value().has_value());
  ASSERT_TRUE(PublishVersionRecord(*storage, Record(1, 7)).ok());
  ASSERT_TRUE(PublishVersionRecord(*storage, Record(2, 7)).ok());
  EXPECT_EQ(ListVersions(*storage).value(), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(ReadLatestVersion(*storage).value(), Record(2, 7));
  EXPECT_EQ(ReadVersion(*storage, 1).value(), Record(1, 7));
  EXPECT_EQ(ReadVersion(*storage, 3).error().code(), StatusCode::kNotFound);
  // Another writer cannot take version 2; the same record again is its own (a retry).
  const Status taken = PublishVersionRecord(*storage, Record(2, 8));
  EXPECT_EQ(taken.code(), StatusCode::kAlreadyExists) << taken.ToString();
  EXPECT_NE(taken.message().find("another writer"), std::string::npos);
  EXPECT_TRUE(PublishVersionRecord(*storage, Record(2, 7)).ok());
  EXPECT_EQ(ReadVersion(*storage, 2).value().writer, 7u);
}

TEST(Versions, ALostReplyIsResolvedByReadingTheRecordBack) {
  auto base = std::make_shared<storage::MemoryStorage>();
  storage::FaultOptions faults;
  faults.lost_reply_probability = 1;
  storage::FaultStorage storage(base, faults);
  ASSERT_TRUE(PublishVersionRecord(storage, Record(1, 7)).ok());
  EXPECT_EQ(storage.counters().lost_replies, 1u);
  EXPECT_EQ(PublishVersionRecord(storage, Record(1, 9)).code(), StatusCode::kAlreadyExists);
  // A failure before anything was written is passed on: the caller retries.
  faults.lost_reply_probability = 0;
  faults.write_error_probability = 1;
  storage::FaultStorage failing(base, faults);
  EXPECT_EQ(PublishVersionRecord(failing, Record(2, 7)).code(), StatusCode::kIOError);
  EXPECT_EQ(ListVersions(*base).value(), std::vector<uint64_t>{1});
}

// A lost reply whose read-back also fails: nobody can tell whether this writer won, so the
// answer is an error (a writer that took it for another's win would remove its files, which
// the published record may list).
TEST(Versions, AnUnreadableReadBackIsNeitherAWinNorALoss) {
  auto base = std::make_shared<storage::MemoryStorage>();
  storage::FaultOptions faults;
  faults.lost_reply_probability = 1;
  faults.read_error_probability = 1;
  storage::FaultStorage storage(base, faults);
  const Status s = PublishVersionRecord(storage, Record(1, 7));
  EXPECT_EQ(s.code(), StatusCode::kIOError) << s.ToString();
  EXPECT_NE(s.message().find("cannot tell whether"), std::string::npos) << s.ToString();
  EXPECT_EQ(ListVersions(*base).value(), std::vector<uint64_t>{1});  // it was created
}

TEST(Versions, RacingWritersOnADirectoryGetOneWinnerPerVersion) {
  test::TempDir dir;
  auto storage = storage::NewPosixStorage(dir.path());
  constexpr int kWriters = 6;
  for (uint64_t version = 1; version <= 10; ++version) {
    std::vector<Status> results(kWriters);
    std::vector<std::thread> threads;
    threads.reserve(kWriters);
    for (int w = 0; w < kWriters; ++w) {
      threads.emplace_back(
          [&, w] { results[w] = PublishVersionRecord(*storage, Record(version, 100 + w)); });
    }
    for (auto& t : threads) t.join();
    int winners = 0;
    for (const Status& st : results) {
      if (st.ok())
        ++winners;
      else
        EXPECT_EQ(st.code(), StatusCode::kAlreadyExists) << st.ToString();
    }
    EXPECT_EQ(winners, 1) << "version " << version;
  }
  EXPECT_EQ(ListVersions(*storage).value().size(), 10u);
  // Nothing but the records is left in versions/ (no temporary files).
  EXPECT_EQ(storage->List("versions").value().size(), 10u);
}

TEST(Versions, ADamagedRecordIsCorruptionNamingIt) {
  auto storage = std::make_shared<storage::MemoryStorage>();
  ASSERT_TRUE(PublishVersionRecord(*storage, Record(1, 7)).ok());
  std::string text = format::EncodeVersionRecord(Record(1, 7));
  text[20] ^= 1;
  ASSERT_TRUE(storage->Remove(format::VersionRecordPath(1)).ok());
  ASSERT_TRUE(storage->CreateExclusive(format::VersionRecordPath(1), test::AsBytes(text)).ok());
  const auto read = ReadVersion(*storage, 1);
  ASSERT_FALSE(read.has_value());
  EXPECT_TRUE(read.error().IsCorruption());
  EXPECT_NE(read.error().ToString().find("0000000000000001.version"), std::string::npos)
      << read.error().ToString();
}

// A web server: no listing, and every probe counted.
class UnlistedStorage : public storage::ForwardingStorage {
 public:
  using ForwardingStorage::ForwardingStorage;
  Result<std::vector<std::string>> List(std::string_view) override {
    return Err(Status::Unsupported("no listing"));
  }
  Result<bool> Exists(std::string_view path) override {
    ++probes;
    return ForwardingStorage::Exists(path);
  }
  int probes = 0;
};

void SetHint(Storage& storage, std::string_view text) {
  (void)storage.Remove(kLatestHintPath);
  ASSERT_TRUE(storage.CreateExclusive(kLatestHintPath, test::AsBytes(text)).ok());
}

TEST(Versions, WithoutAListingTheNewestIsFoundByProbing) {
  auto base = std::make_shared<storage::MemoryStorage>();
  UnlistedStorage web(base);
  EXPECT_FALSE(ReadLatestVersion(web).value().has_value());  // nothing published
  for (uint64_t v = 1; v <= 1000; ++v) ASSERT_TRUE(PublishVersionRecord(*base, Record(v, 7)).ok());
  // No hint (nothing was ever collected), a stale one, a damaged one: found from version 1 or
  // the hint in O(log n) probes.
  EXPECT_EQ(ReadLatestVersion(web).value()->version, 1000u);
  EXPECT_LE(web.probes, 2 * 10 + 4);
  for (const std::string_view hint : {"10\n", "", "garbage\n", "12", "999\n"}) {
    SetHint(*base, hint);
    web.probes = 0;
    EXPECT_EQ(ReadLatestVersion(web).value()->version, 1000u) << hint;
    EXPECT_LE(web.probes, 2 * 10 + 4) << hint;
  }
  // The oldest collected (gc moves the hint up first): the run that is left is listed.
  ASSERT_TRUE(WriteLatestHint(*base, 600).ok());
  for (uint64_t v = 1; v <= 500; ++v) ASSERT_TRUE(base->Remove(VersionRecordPath(v)).ok());
  std::vector<uint64_t> expected;
  for (uint64_t v = 501; v <= 1000; ++v) expected.push_back(v);
  web.probes = 0;
  EXPECT_EQ(ListVersions(web).value(), expected);
  EXPECT_LE(web.probes, 4 * 10 + 8);
  // A hint that names a collected version, and no version 1: said, not guessed.
  SetHint(*base, "300\n");
  const auto lost = ReadLatestVersion(web);
  ASSERT_FALSE(lost.has_value());
  EXPECT_EQ(lost.error().code(), StatusCode::kNotFound);
  EXPECT_NE(lost.error().message().find("names version 300, which is gone"), std::string::npos)
      << lost.error().ToString();
  // Storage that can list never reads the hint.
  EXPECT_EQ(ReadLatestVersion(*base).value()->version, 1000u);
}

}  // namespace
}  // namespace stoker::format
