// The pack option table: every entry reads and writes its own option, and only it; the defaults
// are the front ends' (mixed storage order).
#include "dataset/pack_option_table.h"

#include <gtest/gtest.h>

#include <string>

#include "testing/option_table_checks.h"

namespace stoker::dataset {
namespace {

TEST(PackOptionTableTest, NamesAreUniqueAndDocumented) {
  test::ExpectNamesUniqueAndDocumented<PackSettings>(PackOptionTable(), FindPackOption);
}

TEST(PackOptionTableTest, EachOptionWritesItsOwnFieldOnly) {
  test::ExpectEachOptionWritesItsOwnFieldOnly<PackSettings>(PackOptionTable());
}

TEST(PackOptionTableTest, TheFieldsAreTheOnesThePackerReads) {
  PackSettings s;
  // The front ends' default: every chunk a random mix (seed 0).
  EXPECT_EQ(s.pack.open_chunks, kMixOpenChunks);
  EXPECT_EQ(s.source.shuffle_seed, std::optional<uint64_t>(0));
  EXPECT_EQ(s.pack.chunk_bytes, PackOptions().chunk_bytes);
  EXPECT_EQ(s.pack.mix_memory_bytes, PackOptions().mix_memory_bytes);

  ASSERT_TRUE(FindPackOption("order_seed")->set(s, uint64_t{7}).ok());
  EXPECT_EQ(s.source.shuffle_seed, std::optional<uint64_t>(7));
  EXPECT_EQ(s.pack.mix_seed, 7u);
  ASSERT_TRUE(FindPackOption("order")->set(s, std::string("path")).ok());
  EXPECT_EQ(s.pack.open_chunks, 1u);
  EXPECT_EQ(s.source.shuffle_seed, std::nullopt);
  ASSERT_TRUE(FindPackOption("order")->set(s, std::string("shuffled")).ok());
  EXPECT_EQ(s.source.shuffle_seed, std::optional<uint64_t>(7));  // the seed was kept

  ASSERT_TRUE(FindPackOption("chunk_size")->set(s, uint64_t{4096}).ok());
  EXPECT_EQ(s.pack.chunk_bytes, 4096u);
  ASSERT_TRUE(FindPackOption("mix_memory")->set(s, uint64_t{8} << 30).ok());
  EXPECT_EQ(s.pack.mix_memory_bytes, uint64_t{8} << 30);
  ASSERT_TRUE(FindPackOption("labels")->set(s, std::string("none")).ok());
  EXPECT_EQ(s.pack.labels, LabelPolicy::kNone);
  ASSERT_TRUE(FindPackOption("layout")->set(s, std::string("webdataset")).ok());
  EXPECT_EQ(s.source.layout, DirectoryLayout::kWebDataset);
  ASSERT_TRUE(FindPackOption("threads")->set(s, uint64_t{3}).ok());
  EXPECT_EQ(s.source.threads, 3);
  ASSERT_TRUE(FindPackOption("append")->set(s, true).ok());
  EXPECT_TRUE(s.pack.append);
}

TEST(PackOptionTableTest, ByteSizesReadFromText) {
  const PackOption* chunk_size = FindPackOption("chunk_size");
  ASSERT_NE(chunk_size, nullptr);
  const auto value = ParseOptionText(chunk_size->kind, chunk_size->choices, "16KiB");
  ASSERT_TRUE(value.has_value());
  PackSettings s;
  ASSERT_TRUE(chunk_size->set(s, *value).ok());
  EXPECT_EQ(s.pack.chunk_bytes, 16u << 10);
  EXPECT_EQ(OptionText(chunk_size->kind, chunk_size->get(PackSettings())), "64MiB");
  EXPECT_EQ(OptionText(OptionKind::kByteSize, FindPackOption("mix_memory")->get(s)), "2GiB");
  const auto bad = ParseOptionText(chunk_size->kind, chunk_size->choices, "1.5G");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code(), StatusCode::kInvalidArgument);
}

TEST(PackOptionTableTest, OutOfRangeValuesAreErrors) {
  PackSettings s;
  const Status st = FindPackOption("threads")->set(s, uint64_t{1} << 40);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("threads"), std::string::npos);
  EXPECT_EQ(s.source.threads, 0);
}

}  // namespace
}  // namespace stoker::dataset
