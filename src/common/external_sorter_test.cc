#include "common/external_sorter.h"

#include <gtest/gtest.h>

#include <stdlib.h>
#include <algorithm>

#include <filesystem>

#include "common/random.h"
#include "common/spool.h"

namespace stoker {
namespace {

namespace fs = std::filesystem;

// A private temporary directory, so the test can see that spools leave no file behind.
class SpoolDir {
 public:
  SpoolDir() {
    std::string name = (fs::temp_directory_path() / "stoker-sorter-XXXXXX").string();
    path_ = ::mkdtemp(name.data());
  }
  ~SpoolDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }
  size_t entries() const {
    return static_cast<size_t>(
        std::distance(fs::directory_iterator(path_), fs::directory_iterator()));
  }

 private:
  std::string path_;
};

std::vector<std::string> RandomRecords(size_t n, uint64_t seed) {
  Pcg32 rng(seed);
  std::vector<std::string> out(n);
  for (auto& r : out) {
    r.resize(rng.Below(40));                                // empty records too
    for (char& c : r) c = static_cast<char>(rng.Below(4));  // many shared prefixes and repeats
  }
  return out;
}

std::vector<std::string> SortAll(ExternalSorter& sorter, const std::vector<std::string>& in) {
  for (const auto& r : in) EXPECT_TRUE(sorter.Add(r).ok());
  std::vector<std::string> out;
  EXPECT_TRUE(sorter
                  .Merge([&](std::string_view r) {
                    out.emplace_back(r);
                    return Status::OK();
                  })
                  .ok());
  return out;
}

TEST(ExternalSorter, SortsInMemoryWhenTheBudgetAllows) {
  const auto records = RandomRecords(5000, 1);
  SpoolDir dir;
  ExternalSorter sorter({dir.path(), 64 << 20}, std::less<std::string_view>());
  auto expected = records;
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(SortAll(sorter, records), expected);
  EXPECT_EQ(sorter.runs(), 0u);
}

TEST(ExternalSorter, SpillsRunsAndMergesThemWithinTheBudget) {
  const auto records = RandomRecords(20000, 2);
  SpoolDir dir;
  // ~4 KiB of records per run: about a hundred runs.
  ExternalSorter sorter({dir.path(), 4096}, std::less<std::string_view>());
  for (const auto& r : records) {
    const Status added = sorter.Add(r);
    ASSERT_TRUE(added.ok()) << added.ToString();
  }
  EXPECT_GT(sorter.runs(), 50u);
  EXPECT_EQ(dir.entries(), 0u) << "spools have no name";
  std::vector<std::string> out;
  ASSERT_TRUE(sorter
                  .Merge([&](std::string_view r) {
                    out.emplace_back(r);
                    return Status::OK();
                  })
                  .ok());
  auto expected = records;
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(out, expected);
  EXPECT_EQ(sorter.records(), records.size());
}

// More runs than the budget has 64 KiB read buffers for (here 4): merged in groups first, into
// fewer, longer runs, and still every record once, in order.
TEST(ExternalSorter, MergesManyRunsInSeveralPasses) {
  Pcg32 rng(8);
  std::vector<std::string> records;
  for (int i = 0; i < 3001; ++i) {
    std::string r(900 + rng.Below(200), '\0');
    for (char& c : r) c = static_cast<char>('a' + rng.Below(26));
    records.push_back(std::move(r));
  }
  SpoolDir dir;
  ExternalSorter sorter({dir.path(), 256 << 10}, std::less<std::string_view>());
  for (const auto& r : records) ASSERT_TRUE(sorter.Add(r).ok());
  EXPECT_GT(sorter.runs(), 8u);
  std::vector<std::string> out;
  ASSERT_TRUE(sorter
                  .Merge([&](std::string_view r) {
                    out.emplace_back(r);
                    return Status::OK();
                  })
                  .ok());
  std::sort(records.begin(), records.end());
  EXPECT_EQ(out, records);
}

TEST(ExternalSorter, AnErrorFromTheConsumerStopsTheMerge) {
  SpoolDir dir;
  ExternalSorter sorter({dir.path(), 256}, std::less<std::string_view>());
  for (const auto& r : RandomRecords(1000, 3)) ASSERT_TRUE(sorter.Add(r).ok());
  int seen = 0;
  const Status s = sorter.Merge([&](std::string_view) {
    return ++seen == 10 ? Status::InvalidArgument("stop") : Status::OK();
  });
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(seen, 10);
  EXPECT_FALSE(sorter.Merge([](std::string_view) { return Status::OK(); }).ok()) << "once only";
}

TEST(Spool, ReadsBackWhatWasAppendedAcrossBufferEdges) {
  SpoolDir dir;
  auto spool = Spool::Create(dir.path());
  ASSERT_TRUE(spool.has_value()) << spool.error().ToString();
  std::string all;
  Pcg32 rng(4);
  for (int i = 0; i < 3000; ++i) {
    std::string piece(rng.Below(3000), static_cast<char>('a' + i % 26));
    all += piece;
    ASSERT_TRUE(spool->Append(piece).ok());
  }
  ASSERT_TRUE(spool->Seal().ok());  // a sealed spool frees its buffer and still takes appends
  const std::string tail(5000, 'z');
  all += tail;
  ASSERT_TRUE(spool->Append(tail).ok());
  ASSERT_TRUE(spool->Flush().ok());
  EXPECT_EQ(spool->size(), all.size());
  Spool::Reader reader(*spool, 4096);
  std::string back;
  while (!reader.at_end()) {
    const uint64_t n = 1 + rng.Below(10000);
    auto view = reader.Peek(n);
    ASSERT_TRUE(view.has_value());
    ASSERT_FALSE(view->empty());
    back.append(*view);
    reader.Skip(view->size());
  }
  EXPECT_EQ(back, all);
  EXPECT_FALSE(Spool::Create(dir.path() + "/missing").has_value());
}

}  // namespace
}  // namespace stoker
