// The same behaviour from every Storage: POSIX directories and the in-memory fake run the same
// tests, so tests above storage can use the fake and trust it. Then FaultStorage's injection.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "storage/fault_storage.h"
#include "storage/memory_storage.h"
#include "storage/posix_storage.h"
#include "storage/power_loss_storage.h"
#include "testing/test_util.h"

namespace stoker::storage {
namespace {

using test::AsBytes;

struct Backend {
  std::string name;
  std::function<std::shared_ptr<Storage>(const std::string& dir)> make;
};

class StorageTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override { storage_ = GetParam().make(dir_.path()); }
  test::TempDir dir_;
  std::shared_ptr<Storage> storage_;
};

TEST_P(StorageTest, CreateAppendRead) {
  Storage& s = *storage_;
  auto file = s.Create("a.bin");
  ASSERT_TRUE(file.has_value());
  ASSERT_TRUE((*file)->Append(AsBytes("hello ")).ok());
  ASSERT_TRUE((*file)->Append(AsBytes("")).ok());
  ASSERT_TRUE((*file)->Append(AsBytes("world")).ok());
  ASSERT_TRUE((*file)->Sync().ok());
  ASSERT_TRUE((*file)->Close().ok());
  EXPECT_EQ(test::ReadStored(s, "a.bin"), "hello world");

  auto reader = s.OpenRead("a.bin");
  ASSERT_TRUE(reader.has_value());
  EXPECT_EQ((*reader)->Size(), 11u);
  std::string part(5, '\0');
  ASSERT_TRUE((*reader)->ReadAt(6, {reinterpret_cast<std::byte*>(part.data()), 5}).ok());
  EXPECT_EQ(part, "world");
  // Zero bytes at the very end is fine.
  EXPECT_TRUE((*reader)->ReadAt(11, {}).ok());
}

TEST_P(StorageTest, CreateTruncatesAnExistingFile) {
  test::WriteStored(*storage_, "f", "long old contents");
  test::WriteStored(*storage_, "f", "new");
  EXPECT_EQ(test::ReadStored(*storage_, "f"), "new");
}

TEST_P(StorageTest, ReadPastTheEndIsAnErrorNeverAShortSuccess) {
  test::WriteStored(*storage_, "f", "0123456789");
  auto reader = storage_->OpenRead("f").value();
  std::string buf(4, 'x');
  auto span = std::span<std::byte>(reinterpret_cast<std::byte*>(buf.data()), buf.size());
  EXPECT_TRUE(reader->ReadAt(6, span).ok());
  EXPECT_EQ(buf, "6789");
  for (uint64_t offset : {7ull, 10ull, 11ull, 1ull << 40, ~0ull}) {
    const Status s = reader->ReadAt(offset, span);
    EXPECT_FALSE(s.ok()) << offset;
    EXPECT_EQ(s.code(), StatusCode::kIOError) << offset;
  }
  EXPECT_FALSE(reader->ReadAt(11, {}).ok());
}

TEST_P(StorageTest, MissingFilesAreNotFound) {
  EXPECT_EQ(storage_->OpenRead("nope").error().code(), StatusCode::kNotFound);
  EXPECT_EQ(storage_->Map("nope").error().code(), StatusCode::kNotFound);
  EXPECT_EQ(storage_->Remove("nope").code(), StatusCode::kNotFound);
  EXPECT_EQ(storage_->Rename("nope", "other").code(), StatusCode::kNotFound);
  EXPECT_EQ(storage_->List("no/dir").error().code(), StatusCode::kNotFound);
  EXPECT_EQ(storage_->Create("no/dir/file").error().code(), StatusCode::kNotFound);
}

TEST_P(StorageTest, RenameReplacesAtomically) {
  test::WriteStored(*storage_, "MANIFEST", "old");
  test::WriteStored(*storage_, "MANIFEST.tmp", "new");
  ASSERT_TRUE(storage_->Rename("MANIFEST.tmp", "MANIFEST").ok());
  EXPECT_EQ(test::ReadStored(*storage_, "MANIFEST"), "new");
  EXPECT_FALSE(storage_->Exists("MANIFEST.tmp").value());
  // A fresh name works too.
  ASSERT_TRUE(storage_->Rename("MANIFEST", "other").ok());
  EXPECT_EQ(test::ReadStored(*storage_, "other"), "new");
  EXPECT_FALSE(storage_->Exists("MANIFEST").value());
}

TEST_P(StorageTest, CreateExclusiveCreatesOnceAndNeverReplaces) {
  ASSERT_TRUE(storage_->CreateDirs("versions").ok());
  ASSERT_TRUE(storage_->CreateExclusive("versions/1", AsBytes("first")).ok());
  EXPECT_EQ(test::ReadStored(*storage_, "versions/1"), "first");
  EXPECT_EQ(storage_->CreateExclusive("versions/1", AsBytes("second")).code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(test::ReadStored(*storage_, "versions/1"), "first");
  // No temporary files are left behind, either way.
  EXPECT_EQ(storage_->List("versions").value(), std::vector<std::string>{"1"});
  EXPECT_EQ(storage_->CreateExclusive("no/dir/file", AsBytes("x")).code(), StatusCode::kNotFound);
}

TEST_P(StorageTest, CreateExclusiveHasOneWinnerAmongRacingWriters) {
  ASSERT_TRUE(storage_->CreateDirs("versions").ok());
  constexpr int kWriters = 8;
  for (int round = 0; round < 20; ++round) {
    const std::string path = "versions/" + std::to_string(round);
    std::vector<std::thread> threads;
    std::vector<Status> results(kWriters);
    threads.reserve(kWriters);
    for (int w = 0; w < kWriters; ++w) {
      threads.emplace_back([&, w] {
        results[w] = storage_->CreateExclusive(path, AsBytes("writer " + std::to_string(w)));
      });
    }
    for (auto& t : threads) t.join();
    int winners = 0, winner = -1;
    for (int w = 0; w < kWriters; ++w) {
      if (results[w].ok()) {
        ++winners;
        winner = w;
      } else {
        EXPECT_EQ(results[w].code(), StatusCode::kAlreadyExists) << results[w].ToString();
      }
    }
    ASSERT_EQ(winners, 1);
    EXPECT_EQ(test::ReadStored(*storage_, path), "writer " + std::to_string(winner));
  }
}

TEST_P(StorageTest, DirectoriesListSortedAndExists) {
  ASSERT_TRUE(storage_->CreateDirs("chunks/deep/er").ok());
  ASSERT_TRUE(storage_->CreateDirs("chunks").ok());  // idempotent
  ASSERT_TRUE(storage_->CreateDirs("snapshots").ok());
  for (const char* name : {"c", "a", "b", "B", "é", "a.b"})
    test::WriteStored(*storage_, std::string("chunks/") + name, name);
  test::WriteStored(*storage_, "MANIFEST", "m");
  EXPECT_EQ(storage_->List("chunks").value(),
            (std::vector<std::string>{"B", "a", "a.b", "b", "c", "deep", "é"}));
  EXPECT_EQ(storage_->List("").value(),
            (std::vector<std::string>{"MANIFEST", "chunks", "snapshots"}));
  EXPECT_EQ(storage_->List("snapshots").value(), std::vector<std::string>{});
  EXPECT_EQ(storage_->List("chunks/deep").value(), std::vector<std::string>{"er"});
  EXPECT_TRUE(storage_->Exists("chunks").value());
  EXPECT_TRUE(storage_->Exists("chunks/a").value());
  EXPECT_TRUE(storage_->Exists("chunks/deep/er").value());
  EXPECT_FALSE(storage_->Exists("chunks/z").value());
  EXPECT_FALSE(storage_->Exists("zz/top").value());
  EXPECT_TRUE(storage_->SyncDir("chunks").ok());
  EXPECT_TRUE(storage_->SyncDir("").ok());

  ASSERT_TRUE(storage_->Remove("chunks/b").ok());
  EXPECT_FALSE(storage_->Exists("chunks/b").value());
  EXPECT_EQ(storage_->List("chunks").value().size(), 6u);
}

TEST_P(StorageTest, MapReturnsTheWholeFile) {
  const std::string data = test::RandomBytes(4, 100000);
  test::WriteStored(*storage_, "big", data);
  auto mapped = storage_->Map("big");
  ASSERT_TRUE(mapped.has_value());
  EXPECT_EQ(std::string_view(reinterpret_cast<const char*>((*mapped)->bytes().data()),
                             (*mapped)->bytes().size()),
            data);
  test::WriteStored(*storage_, "empty", "");
  auto empty = storage_->Map("empty");
  ASSERT_TRUE(empty.has_value());
  EXPECT_TRUE((*empty)->bytes().empty());
}

TEST_P(StorageTest, DescribeNamesThePath) {
  EXPECT_NE(storage_->Describe("chunks/x.chunk").find("chunks/x.chunk"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(
    Backends, StorageTest,
    ::testing::Values(
        Backend{"Posix", [](const std::string& dir) { return NewPosixStorage(dir + "/"); }},
        Backend{"Memory", [](const std::string&) { return std::make_shared<MemoryStorage>(); }},
        Backend{"PowerLoss",
                [](const std::string&) { return std::make_shared<PowerLossStorage>(); }}),
    [](const ::testing::TestParamInfo<Backend>& p) { return p.param.name; });

// What survives a power loss: synced bytes, and names whose directory was synced after them.
TEST(PowerLossStorage, KeepsWhatWasSyncedAndDropsTheRest) {
  PowerLossStorage s;
  ASSERT_TRUE(s.CreateDirs("d").ok());
  auto f = s.Create("d/a").value();
  ASSERT_TRUE(f->Append(AsBytes("synced")).ok());
  ASSERT_TRUE(f->Sync().ok());
  ASSERT_TRUE(f->Append(AsBytes(" lost")).ok());
  ASSERT_TRUE(s.SyncDir("d").ok());
  auto g = s.Create("d/unnamed").value();  // synced bytes, but its name never was
  ASSERT_TRUE(g->Append(AsBytes("x")).ok());
  ASSERT_TRUE(g->Sync().ok());
  ASSERT_TRUE(s.CreateExclusive("d/record", AsBytes("whole")).ok());  // durable by contract
  EXPECT_EQ(test::ReadStored(s, "d/a"), "synced lost");
  s.PowerLoss();
  EXPECT_EQ(test::ReadStored(s, "d/a"), "synced");
  EXPECT_FALSE(s.Exists("d/unnamed").value());
  EXPECT_EQ(test::ReadStored(s, "d/record"), "whole");
  EXPECT_EQ(s.List("d").value(), (std::vector<std::string>{"a", "record"}));
}

TEST(PowerLossStorage, RenamesAndRemovalsNeedTheirDirectorysSync) {
  PowerLossStorage s;
  ASSERT_TRUE(s.CreateDirs("d").ok());
  ASSERT_TRUE(s.CreateDirs("e").ok());
  ASSERT_TRUE(s.CreateExclusive("d/old", AsBytes("1")).ok());
  ASSERT_TRUE(s.CreateExclusive("d/gone", AsBytes("2")).ok());
  ASSERT_TRUE(s.Rename("d/old", "d/new").ok());
  ASSERT_TRUE(s.Remove("d/gone").ok());
  s.PowerLoss();
  EXPECT_EQ(s.List("d").value(), (std::vector<std::string>{"gone", "old"}));

  ASSERT_TRUE(s.Rename("d/old", "d/new").ok());
  ASSERT_TRUE(s.Remove("d/gone").ok());
  ASSERT_TRUE(s.SyncDir("d").ok());
  s.PowerLoss();
  EXPECT_EQ(s.List("d").value(), (std::vector<std::string>{"new"}));

  // A directory the file system flushed anyway keeps its unsynced changes; others do not.
  ASSERT_TRUE(s.Remove("d/new").ok());
  ASSERT_TRUE(s.CreateExclusive("e/x", AsBytes("3")).ok());
  ASSERT_TRUE(s.Remove("e/x").ok());
  s.PowerLoss([](std::string_view dir) { return dir == "d"; });
  EXPECT_TRUE(s.List("d").value().empty());
  EXPECT_EQ(s.List("e").value(), (std::vector<std::string>{"x"}));
}

TEST(PowerLossStorage, NothingChangesAfterTheCrashPoint) {
  PowerLossStorage s;
  ASSERT_TRUE(s.CreateDirs("d").ok());  // mutation 1
  s.CrashAfter(2);
  auto f = s.Create("d/a").value();           // 2
  ASSERT_TRUE(f->Append(AsBytes("x")).ok());  // 3
  EXPECT_EQ(s.mutations(), 3u);
  const Status stopped = f->Sync();
  EXPECT_EQ(stopped.code(), StatusCode::kIOError) << stopped.ToString();
  EXPECT_FALSE(s.OpenRead("d/a").has_value());  // reads stop too
  EXPECT_EQ(s.mutations(), 3u);
  s.PowerLoss();  // the file's name was never synced
  EXPECT_FALSE(s.Exists("d/a").value());
  EXPECT_TRUE(s.CreateExclusive("d/b", AsBytes("y")).ok());  // power is back
}

TEST(MemoryStorage, TestHooksReplaceContentsForNewReaders) {
  MemoryStorage s;
  test::WriteStored(s, "f", "original");
  auto old_reader = s.OpenRead("f").value();
  s.SetContents("f", "changed!");
  EXPECT_EQ(s.GetContents("f").value(), "changed!");
  EXPECT_EQ(test::ReadStored(s, "f"), "changed!");
  std::string buf(8, '\0');
  ASSERT_TRUE(old_reader->ReadAt(0, {reinterpret_cast<std::byte*>(buf.data()), 8}).ok());
  EXPECT_EQ(buf, "original");
  EXPECT_EQ(s.GetContents("missing").error().code(), StatusCode::kNotFound);
}

// ---- FaultStorage ----

FaultOptions Options(const std::function<void(FaultOptions&)>& set) {
  FaultOptions o;
  set(o);
  return o;
}

class FaultStorageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = std::make_shared<MemoryStorage>();
    ASSERT_TRUE(base_->CreateDirs("chunks").ok());
    test::WriteStored(*base_, "chunks/a", data_);
    test::WriteStored(*base_, "MANIFEST", "manifest");
  }
  // Outcome of `reads` 100-byte reads: 'e' error, 'f' flipped, '.' exact.
  std::string Outcomes(FaultStorage& fs, int reads) {
    auto file = fs.OpenRead("chunks/a").value();
    std::string out;
    std::string buf(100, '\0');
    for (int i = 0; i < reads; ++i) {
      const uint64_t offset = (i * 37) % (data_.size() - 100);
      const Status s = file->ReadAt(offset, {reinterpret_cast<std::byte*>(buf.data()), 100});
      if (!s.ok()) {
        EXPECT_EQ(s.code(), StatusCode::kIOError);
        out += 'e';
        continue;
      }
      const std::string_view expected = std::string_view(data_).substr(offset, 100);
      int bits = 0;
      for (size_t k = 0; k < 100; ++k)
        bits +=
            std::popcount(static_cast<unsigned>(static_cast<unsigned char>(buf[k] ^ expected[k])));
      EXPECT_LE(bits, 1);  // a flip changes exactly one bit
      out += bits == 1 ? 'f' : '.';
    }
    return out;
  }

  std::shared_ptr<MemoryStorage> base_;
  const std::string data_ = test::RandomBytes(11, 10000);
};

TEST_F(FaultStorageTest, NoFaultsByDefault) {
  FaultStorage fs(base_, {});
  EXPECT_EQ(Outcomes(fs, 1000), std::string(1000, '.'));
  const auto c = fs.counters();
  EXPECT_EQ(c.read_errors + c.short_reads + c.bit_flips + c.write_errors, 0u);
}

TEST_F(FaultStorageTest, ReadErrorsAtTheConfiguredRate) {
  FaultStorage fs(base_, Options([](FaultOptions& o) {
                    o.read_error_probability = 0.25;
                    o.seed = 3;
                  }));
  const std::string out = Outcomes(fs, 4000);
  const auto errors = std::count(out.begin(), out.end(), 'e');
  EXPECT_EQ(static_cast<uint64_t>(errors), fs.counters().read_errors);
  EXPECT_NEAR(errors, 1000, 120);
  EXPECT_EQ(std::count(out.begin(), out.end(), 'f'), 0);
}

TEST_F(FaultStorageTest, ShortReadsAreErrors) {
  FaultStorage fs(base_, Options([](FaultOptions& o) {
                    o.short_read_probability = 0.5;
                    o.seed = 4;
                  }));
  const std::string out = Outcomes(fs, 2000);
  const auto errors = std::count(out.begin(), out.end(), 'e');
  EXPECT_EQ(static_cast<uint64_t>(errors), fs.counters().short_reads);
  EXPECT_NEAR(errors, 1000, 120);
}

TEST_F(FaultStorageTest, BitFlipsChangeExactlyOneBit) {
  FaultStorage fs(base_, Options([](FaultOptions& o) {
                    o.bit_flip_probability = 0.1;
                    o.seed = 5;
                  }));
  const std::string out = Outcomes(fs, 5000);
  const auto flips = std::count(out.begin(), out.end(), 'f');
  EXPECT_EQ(static_cast<uint64_t>(flips), fs.counters().bit_flips);
  EXPECT_NEAR(flips, 500, 90);
  EXPECT_EQ(std::count(out.begin(), out.end(), 'e'), 0);
}

TEST_F(FaultStorageTest, SameSeedSameFaultsOtherSeedOtherFaults) {
  const FaultOptions options = Options([](FaultOptions& o) {
    o.read_error_probability = 0.1;
    o.bit_flip_probability = 0.1;
    o.seed = 9;
  });
  FaultStorage a(base_, options), b(base_, options);
  FaultOptions other = options;
  other.seed = 10;
  FaultStorage c(base_, other);
  const std::string out_a = Outcomes(a, 1000);
  EXPECT_EQ(out_a, Outcomes(b, 1000));
  EXPECT_NE(out_a, Outcomes(c, 1000));
}

TEST_F(FaultStorageTest, PathFilterLimitsFaults) {
  FaultStorage fs(base_, Options([](FaultOptions& o) {
                    o.path_filter = "chunks/";
                    o.read_error_probability = 1.0;
                  }));
  EXPECT_EQ(Outcomes(fs, 10), std::string(10, 'e'));
  auto manifest = fs.OpenRead("MANIFEST").value();
  std::string buf(8, '\0');
  EXPECT_TRUE(manifest->ReadAt(0, {reinterpret_cast<std::byte*>(buf.data()), 8}).ok());
  EXPECT_TRUE(fs.Map("MANIFEST").has_value());
  EXPECT_FALSE(fs.Map("chunks/a").has_value());
}

TEST_F(FaultStorageTest, MapFlipsOneBitOfACopy) {
  FaultStorage fs(base_, Options([](FaultOptions& o) {
                    o.bit_flip_probability = 1.0;
                    o.seed = 6;
                  }));
  auto mapped = fs.Map("chunks/a").value();
  ASSERT_EQ(mapped->bytes().size(), data_.size());
  int bits = 0;
  for (size_t k = 0; k < data_.size(); ++k) {
    bits += std::popcount(static_cast<unsigned>(
        static_cast<unsigned char>(static_cast<char>(mapped->bytes()[k]) ^ data_[k])));
  }
  EXPECT_EQ(bits, 1);
  EXPECT_EQ(base_->GetContents("chunks/a").value(), data_);  // the stored bytes are untouched
}

TEST_F(FaultStorageTest, WriteErrorsAtTheConfiguredRate) {
  FaultStorage fs(base_, Options([](FaultOptions& o) {
                    o.write_error_probability = 0.2;
                    o.seed = 7;
                  }));
  auto file = fs.Create("chunks/new").value();
  int failed = 0;
  for (int i = 0; i < 2000; ++i) {
    const Status s = file->Append(AsBytes("x"));
    if (!s.ok()) {
      EXPECT_EQ(s.code(), StatusCode::kIOError);
      EXPECT_NE(s.message().find("chunks/new"), std::string::npos);
      ++failed;
    }
  }
  EXPECT_EQ(static_cast<uint64_t>(failed), fs.counters().write_errors);
  EXPECT_NEAR(failed, 400, 70);
  // Failed appends wrote nothing.
  EXPECT_EQ(base_->GetContents("chunks/new").value().size(), static_cast<size_t>(2000 - failed));
}

TEST_F(FaultStorageTest, RenameCanFail) {
  FaultStorage fs(base_, Options([](FaultOptions& o) { o.write_error_probability = 1.0; }));
  test::WriteStored(*base_, "MANIFEST.tmp", "new");
  EXPECT_EQ(fs.Rename("MANIFEST.tmp", "MANIFEST").code(), StatusCode::kIOError);
  EXPECT_EQ(base_->GetContents("MANIFEST").value(), "manifest");  // nothing happened
}

}  // namespace
}  // namespace stoker::storage
