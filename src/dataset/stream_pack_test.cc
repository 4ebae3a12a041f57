// StreamPack: a producer thread hands samples to a pack running on its own thread.
#include "dataset/stream_pack.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "stoker/dataset.h"
#include "storage/posix_storage.h"
#include "testing/test_util.h"

namespace stoker::dataset {
namespace {

std::vector<SourceItem> Sample(uint64_t k, size_t bytes) {
  std::vector<SourceItem> items;
  for (const char* column : {"a", "label"}) {
    SourceItem item;
    item.path = "w/" + std::to_string(1000000 + k) + "." + column;
    const std::string text = std::string(column) == "label"
                                 ? std::to_string(k % 5)
                                 : std::string(bytes, char('a' + k % 26));
    const auto* p = reinterpret_cast<const std::byte*>(text.data());
    item.bytes.assign(p, p + text.size());
    items.push_back(std::move(item));
  }
  return items;
}

PackOptions ColumnOptions() {
  PackOptions options;
  options.chunk_bytes = 64 << 10;
  options.group_samples = true;
  options.open_chunks = 8;
  options.columns = "a:bytes label:int label=label";
  return options;
}

TEST(StreamPack, PublishesWhatWasAddedThroughASmallQueue) {
  test::TempDir dir;
  // A queue smaller than one sample: each waits for the pack to take the one before.
  auto pack = StreamPack::Start(storage::NewPosixStorage(dir.path()), ColumnOptions(), 100);
  ASSERT_TRUE(pack.has_value()) << pack.error().ToString();
  for (uint64_t k = 0; k < 500; ++k) ASSERT_TRUE((*pack)->Add(Sample(k, 1000)).ok());
  EXPECT_EQ((*pack)->samples_added(), 500u);
  auto summary = (*pack)->Finish();
  ASSERT_TRUE(summary.has_value()) << summary.error().ToString();
  EXPECT_EQ(summary->samples, 500u);
  EXPECT_EQ(summary->classes, 5u);
  EXPECT_GT(summary->chunks_total, 1u);
  auto ds = Dataset::Open(dir.path());
  ASSERT_TRUE(ds.has_value()) << ds.error().ToString();
  EXPECT_EQ((*ds)->sample_count(), 500u);
  for (uint64_t k : {0u, 7u, 499u}) {
    EXPECT_EQ(*(*ds)->SampleLabel(k), static_cast<int32_t>(k % 5));
    const auto [first, count] = *(*ds)->SampleFiles(k);
    EXPECT_EQ(count, 2u);
    EXPECT_EQ(test::AsString(*(*ds)->ReadFile(first)), std::string(1000, char('a' + k % 26)));
  }
  EXPECT_FALSE((*pack)->Add(Sample(0, 1)).ok());  // finished
}

TEST(StreamPack, AbortPublishesNothingAndRemovesItsChunks) {
  test::TempDir dir;
  auto pack = StreamPack::Start(storage::NewPosixStorage(dir.path()), ColumnOptions(), 1 << 20);
  ASSERT_TRUE(pack.has_value());
  for (uint64_t k = 0; k < 300; ++k) ASSERT_TRUE((*pack)->Add(Sample(k, 1000)).ok());
  (*pack)->Abort();
  (*pack)->Abort();  // idempotent
  EXPECT_FALSE(Dataset::Open(dir.path()).has_value());
  EXPECT_TRUE(test::ChunkFiles(dir.path()).empty());
  pack->reset();  // the destructor after an abort does nothing more
}

TEST(StreamPack, ErrorsOfThePackComeBackFromStartOrAdd) {
  test::TempDir dir;
  {
    auto pack = StreamPack::Start(storage::NewPosixStorage(dir.path()), ColumnOptions(), 1 << 20);
    ASSERT_TRUE(pack.has_value());
    ASSERT_TRUE((*pack)->Add(Sample(0, 10)).ok());
    ASSERT_TRUE((*pack)->Finish().has_value());
  }
  // The destination holds a dataset: refused before any sample is taken.
  auto again = StreamPack::Start(storage::NewPosixStorage(dir.path()), ColumnOptions(), 1 << 20);
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().code(), StatusCode::kAlreadyExists);
  // Appending with other columns is refused too, naming both schemas.
  PackOptions other = ColumnOptions();
  other.append = true;
  other.columns = "a:bytes";
  auto mismatch = StreamPack::Start(storage::NewPosixStorage(dir.path()), other, 1 << 20);
  ASSERT_FALSE(mismatch.has_value());
  EXPECT_NE(mismatch.error().message().find("columns are"), std::string::npos);
  // A duplicate path fails the pack; Finish reports it and nothing new is published.
  PackOptions append = ColumnOptions();
  append.append = true;
  auto dup = StreamPack::Start(storage::NewPosixStorage(dir.path()), append, 1 << 20);
  ASSERT_TRUE(dup.has_value()) << dup.error().ToString();
  ASSERT_TRUE((*dup)->Add(Sample(1, 10)).ok());
  ASSERT_TRUE((*dup)->Add(Sample(1, 10)).ok());
  auto result = (*dup)->Finish();
  ASSERT_FALSE(result.has_value());
  EXPECT_NE(result.error().message().find("duplicate path"), std::string::npos)
      << result.error().ToString();
  EXPECT_EQ((*Dataset::Open(dir.path()))->version(), 1u);
}

}  // namespace
}  // namespace stoker::dataset
