#include "common/escape.h"

#include <gtest/gtest.h>

namespace stoker {
namespace {

TEST(Escape, Utf8IsRecognisedAndMalformedBytesAreNot) {
  EXPECT_TRUE(IsUtf8("plain/ascii.jpg"));
  EXPECT_TRUE(IsUtf8("caf\xc3\xa9/\xe6\x97\xa5\xe6\x9c\xac.jpg"));  // café/日本
  EXPECT_TRUE(IsUtf8("\xf0\x9f\x90\x88"));                          // U+1F408
  EXPECT_FALSE(IsUtf8("latin1-caf\xe9.jpg"));
  EXPECT_FALSE(IsUtf8("\xc0\xaf"));          // overlong '/'
  EXPECT_FALSE(IsUtf8("\xed\xa0\x80"));      // a surrogate
  EXPECT_FALSE(IsUtf8("\xf4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(IsUtf8("\xe6\x97"));          // cut short
}

TEST(Escape, TerminalSafeWritesControlAndMalformedBytesAsHex) {
  EXPECT_EQ(TerminalSafe("caf\xc3\xa9.jpg"), "caf\xc3\xa9.jpg");
  EXPECT_EQ(TerminalSafe("a\x1b[2Jb"), "a\\x1b[2Jb");  // an ESC sequence cannot clear the screen
  EXPECT_EQ(TerminalSafe("tab\there\nnew"), "tab\\x09here\\x0anew");
  EXPECT_EQ(TerminalSafe("del\x7f"), "del\\x7f");
  EXPECT_EQ(TerminalSafe("csi\xc2\x9b"), "csi\\xc2\\x9b");  // C1 control U+009B
  EXPECT_EQ(TerminalSafe("latin1-caf\xe9"), "latin1-caf\\xe9");
  EXPECT_EQ(TerminalSafe("back\\slash"), "back\\\\slash");  // \x41 in a name is not 'A'
}

TEST(Escape, JsonQuotedFollowsPythonsSurrogateEscape) {
  EXPECT_EQ(JsonQuoted("a.jpg"), "\"a.jpg\"");
  EXPECT_EQ(JsonQuoted("q\"b\\"), "\"q\\\"b\\\\\"");
  EXPECT_EQ(JsonQuoted("esc\x1b"), "\"esc\\u001b\"");
  EXPECT_EQ(JsonQuoted("caf\xc3\xa9"), "\"caf\xc3\xa9\"");
  // b'caf\xe9'.decode('utf-8', 'surrogateescape') == 'caf\udce9'
  EXPECT_EQ(JsonQuoted("caf\xe9"), "\"caf\\udce9\"");
  EXPECT_EQ(JsonQuoted(std::string_view("\xff\x00", 2)), "\"\\udcff\\u0000\"");
}

}  // namespace
}  // namespace stoker
