// The loader option table: every entry reads and writes its own option, and only it; the
// nullable ones read back unset by default; every bad value is an error naming its option.
#include "loader/loader_option_table.h"

#include <gtest/gtest.h>

#include <string>

#include "testing/option_table_checks.h"

namespace stoker::loader {
namespace {

TEST(LoaderOptionTableTest, NamesAreUniqueAndDocumented) {
  test::ExpectNamesUniqueAndDocumented<LoaderOptions>(LoaderOptionTable(), FindLoaderOption);
}

TEST(LoaderOptionTableTest, EachOptionWritesItsOwnFieldOnly) {
  test::ExpectEachOptionWritesItsOwnFieldOnly<LoaderOptions>(LoaderOptionTable());
}

TEST(LoaderOptionTableTest, TheDefaultsAreStokerLoaders) {
  const LoaderOptions o;
  const auto get = [&](std::string_view name) { return FindLoaderOption(name)->get(o); };
  for (const char* unset : {"batch_size", "rank", "world_size", "memory_budget", "block_size"}) {
    EXPECT_EQ(get(unset), OptionValue(std::monostate{})) << unset;
  }
  EXPECT_EQ(get("shuffle"), OptionValue(std::string("chunk")));
  EXPECT_EQ(get("seed"), OptionValue(uint64_t{0}));
  EXPECT_EQ(get("window"), OptionValue(uint64_t{16}));
  EXPECT_EQ(get("drop_last"), OptionValue(false));
  EXPECT_EQ(get("io_depth"), OptionValue(uint64_t{8}));
}

TEST(LoaderOptionTableTest, AnUnsetValueUnsetsANullableOption) {
  LoaderOptions o;
  const LoaderOption* rank = FindLoaderOption("rank");
  ASSERT_TRUE(rank->set(o, uint64_t{2}).ok());
  EXPECT_EQ(o.rank, std::optional<uint64_t>(2));
  ASSERT_TRUE(rank->set(o, std::monostate{}).ok());
  EXPECT_EQ(o.rank, std::nullopt);
}

TEST(LoaderOptionTableTest, OutOfRangeValuesAreErrorsNamingTheOption) {
  struct Bad {
    std::string_view name;
    OptionValue value;
    std::string_view says;
  };
  const Bad bad[] = {
      {"batch_size", uint64_t{0}, "batch_size must be at least 1"},
      {"window", uint64_t{0}, "window must be at least 1"},
      {"window", uint64_t{1} << 32, "window is too large"},
      {"io_depth", uint64_t{0}, "io_depth must be at least 1"},
      {"world_size", uint64_t{0}, "world_size must be at least 1"},
      {"memory_budget", uint64_t{0}, "memory_budget must be at least 1 (bytes)"},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(std::string(b.name));
    LoaderOptions o;
    const Status st = FindLoaderOption(b.name)->set(o, b.value);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(b.says), std::string::npos) << st.message();
    EXPECT_EQ(FindLoaderOption(b.name)->get(o), FindLoaderOption(b.name)->get(LoaderOptions()));
  }
}

TEST(LoaderOptionTableTest, RankMustBeBelowWorldSize) {
  LoaderOptions o;
  EXPECT_TRUE(o.Validate().ok());
  o.rank = 3;
  EXPECT_TRUE(o.Validate().ok());  // world_size from the environment: the loader checks it
  o.world_size = 3;
  const Status st = o.Validate();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "rank 3 out of range for world_size 3");
  o.world_size = 4;
  EXPECT_TRUE(o.Validate().ok());
}

}  // namespace
}  // namespace stoker::loader
