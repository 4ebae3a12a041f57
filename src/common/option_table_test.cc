// Option text (what a command line gives) read per kind, and written back the same way.
#include "common/option_table.h"

#include <gtest/gtest.h>

#include "common/progress.h"

namespace stoker {
namespace {

TEST(OptionTextTest, ByteSizesTakeTheOneSyntaxOfSizes) {
  EXPECT_EQ(ParseOptionText(OptionKind::kByteSize, {}, "12345"), OptionValue(uint64_t{12345}));
  EXPECT_EQ(ParseOptionText(OptionKind::kByteSize, {}, "64MiB"), OptionValue(uint64_t{64} << 20));
  EXPECT_EQ(ParseOptionText(OptionKind::kByteSize, {}, "48G"), OptionValue(uint64_t{48} << 30));
  for (const char* bad : {"", "1.5G", "big", "-1", "64 MiB", "99999999999T"}) {
    const auto parsed = ParseOptionText(OptionKind::kByteSize, {}, bad);
    ASSERT_FALSE(parsed.has_value()) << bad;
    EXPECT_EQ(parsed.error().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.error().message().find("is not a size"), std::string::npos) << bad;
  }
}

TEST(OptionTextTest, ByteSizeTextReadsBackAsTheSameBytes) {
  EXPECT_EQ(ByteSizeText(uint64_t{64} << 20), "64MiB");
  EXPECT_EQ(ByteSizeText(uint64_t{2} << 30), "2GiB");
  EXPECT_EQ(ByteSizeText(4096), "4KiB");
  EXPECT_EQ(ByteSizeText(4097), "4097");
  EXPECT_EQ(ByteSizeText(0), "0");
  EXPECT_EQ(ByteSizeText(uint64_t{1} << 50), "1024TiB");
  for (const uint64_t bytes : {uint64_t{0}, uint64_t{1}, uint64_t{3} << 20, uint64_t{1} << 50}) {
    EXPECT_EQ(ParseByteSize(ByteSizeText(bytes)), bytes);
    EXPECT_EQ(OptionText(OptionKind::kByteSize, bytes), ByteSizeText(bytes));
  }
}

TEST(OptionTextTest, OtherKinds) {
  const std::string_view choices[] = {"auto", "none"};
  EXPECT_EQ(ParseOptionText(OptionKind::kChoice, choices, "none"), OptionValue("none"));
  const auto bad_choice = ParseOptionText(OptionKind::kChoice, choices, "some");
  ASSERT_FALSE(bad_choice.has_value());
  EXPECT_EQ(bad_choice.error().message(), "'some' is not one of auto, none");
  EXPECT_EQ(ParseOptionText(OptionKind::kUnsigned, {}, "7"), OptionValue(uint64_t{7}));
  EXPECT_FALSE(ParseOptionText(OptionKind::kUnsigned, {}, "-1").has_value());
  EXPECT_FALSE(ParseOptionText(OptionKind::kUnsigned, {}, "7x").has_value());
  EXPECT_EQ(ParseOptionText(OptionKind::kBool, {}, "true"), OptionValue(true));
  EXPECT_FALSE(ParseOptionText(OptionKind::kBool, {}, "yes").has_value());
  // Numbers read back what OptionText writes (how options travel to a feeder, bit for bit).
  EXPECT_EQ(ParseOptionText(OptionKind::kPair, {}, "0.5, 2"), OptionValue(std::vector{0.5, 2.0}));
  EXPECT_EQ(ParseOptionText(OptionKind::kPair, {}, "1,2"), OptionValue(std::vector{1.0, 2.0}));
  EXPECT_EQ(ParseOptionText(OptionKind::kNumber, {}, "0.1"), OptionValue(0.1));
  EXPECT_FALSE(ParseOptionText(OptionKind::kPair, {}, "1, x").has_value());
  EXPECT_FALSE(ParseOptionText(OptionKind::kNumber, {}, "").has_value());
  EXPECT_EQ(OptionText(OptionKind::kUnsigned, uint64_t{7}), "7");
  EXPECT_EQ(OptionText(OptionKind::kChoice, std::string("none")), "none");
  EXPECT_EQ(OptionText(OptionKind::kPair, std::vector<double>{0.5, 2}), "0.5, 2");
}

TEST(OptionTextTest, AnUnsetValueHasNoText) {
  EXPECT_EQ(OptionText(OptionKind::kUnsigned, std::monostate{}), "");
  EXPECT_EQ(OptionText(OptionKind::kByteSize, std::monostate{}), "");
}

}  // namespace
}  // namespace stoker
