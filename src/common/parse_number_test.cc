#include "common/parse_number.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <string_view>

#include <gtest/gtest.h>

namespace stoker {
namespace {

TEST(ParseNumberTest, UnsignedTakesOnlyWholeDigitStrings) {
  EXPECT_EQ(ParseUnsigned<uint32_t>("42"), 42u);
  EXPECT_EQ(ParseUnsigned<uint32_t>("ff", 16), 255u);
  for (std::string_view bad : {"", "+1", "-1", " 1", "1x", "4294967296"}) {
    EXPECT_EQ(ParseUnsigned<uint32_t>(bad), std::nullopt) << bad;
  }
}

TEST(ParseNumberTest, DoubleReadsWholeNumbers) {
  EXPECT_EQ(ParseDouble("0.485"), 0.485);
  EXPECT_EQ(ParseDouble("-2.5e3"), -2500.0);
  EXPECT_EQ(ParseDouble(".5"), 0.5);
  EXPECT_EQ(ParseDouble("0.1000000000000000055511151231257827"), 0.1);
  EXPECT_TRUE(std::isinf(ParseDouble("inf").value_or(0)));
  EXPECT_TRUE(std::isnan(ParseDouble("nan").value_or(0)));
  for (std::string_view bad : {"", "-", "+1", " 1", "1 ", "1e", "0x10", "1,5", "1e400", "--1"}) {
    EXPECT_EQ(ParseDouble(bad), std::nullopt) << bad;
  }
}

// The wheel's libc++ reads doubles with strtod: it must agree with from_chars on everything.
TEST(ParseNumberTest, StrtodPathAgreesWithParseDouble) {
  for (std::string_view text : {"0",
                                "-0",
                                "1",
                                "0.485",
                                "3.14159265358979323846",
                                "-2.5e3",
                                "1E-5",
                                ".5",
                                "5.",
                                "inf",
                                "-inf",
                                "1e308",
                                "4.9e-324",
                                "123456789012345678901234567890",
                                "",
                                "-",
                                "+1",
                                " 1",
                                "1 ",
                                "1e",
                                "0x10",
                                "0X1p3",
                                "1,5",
                                "1e400",
                                "--1",
                                "-+1",
                                "e5",
                                "1.2.3"}) {
    EXPECT_EQ(ParseDoubleWithStrtod(text), ParseDouble(text)) << text;
  }
  EXPECT_TRUE(std::isnan(ParseDoubleWithStrtod("nan").value_or(0)));
}

}  // namespace
}  // namespace stoker
