#include "format/version_record.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "common/crc32c.h"

namespace stoker::format {
namespace {

VersionRecord Sample() {
  VersionRecord r;
  r.version = 5;
  r.parent = 4;
  r.created_unix_seconds = 1795000000;
  r.writer = 0x9f0c3a1e77d2b6c5;
  r.flags = 3;
  r.segments = {{0x3c1d0a9e5b7f2a60, 30718512, 0x5e1f0c2d, 1271167, 1271167, 1000, 2196},
                {0x77aa01be9c3d4f10, 243105, 0x0a1b2c3d, 10000, 10000, 0, 17}};
  r.files = r.samples = 1281167;
  r.classes = 1000;
  r.chunks = 2213;
  r.bytes = 147897477120;
  return r;
}

TEST(VersionRecord, RoundTrips) {
  const std::string text = EncodeVersionRecord(Sample());
  EXPECT_TRUE(text.starts_with("stoker-version 2\nversion 5\nparent 4\n")) << text;
  auto parsed = ParseVersionRecord(text);
  ASSERT_TRUE(parsed.has_value()) << parsed.error().ToString();
  EXPECT_EQ(*parsed, Sample());
}

TEST(VersionRecord, ColumnsMakeAFormat3RecordThatRoundTrips) {
  VersionRecord r = Sample();
  r.columns = "caption:str image:jpeg label:int label=label";
  const std::string text = EncodeVersionRecord(r);
  EXPECT_TRUE(text.starts_with("stoker-version 3\n")) << text;
  EXPECT_NE(text.find("\ncolumns caption:str image:jpeg label:int label=label\n"),
            std::string::npos);
  auto parsed = ParseVersionRecord(text);
  ASSERT_TRUE(parsed.has_value()) << parsed.error().ToString();
  EXPECT_EQ(*parsed, r);
}

TEST(VersionRecord, RefusesABadColumnsLine) {
  VersionRecord r = Sample();
  r.columns = "image:jpg";  // not a type
  auto parsed = ParseVersionRecord(EncodeVersionRecord(r));
  ASSERT_FALSE(parsed.has_value());
  EXPECT_EQ(parsed.error().code(), StatusCode::kCorruption) << parsed.error().ToString();
  EXPECT_NE(parsed.error().message().find("unknown type"), std::string::npos);
}

TEST(VersionRecord, NamesSortByVersion) {
  EXPECT_EQ(VersionRecordPath(5), "versions/0000000000000005.version");
  EXPECT_EQ(VersionOfRecordName("000000000000001a.version"), 26u);
  EXPECT_EQ(VersionOfRecordName("000000000000001a.version.tmp-1"), 0u);
  EXPECT_EQ(VersionOfRecordName("000000000000001A.version"), 0u);
  EXPECT_EQ(SegmentPath(0xab), "segments/00000000000000ab.seg");
}

TEST(VersionRecord, EveryDamagedByteIsCorruption) {
  const std::string text = EncodeVersionRecord(Sample());
  for (size_t i = 0; i < text.size(); ++i) {
    for (char flip : {char{0x01}, char{0x20}}) {
      std::string bad = text;
      bad[i] = static_cast<char>(bad[i] ^ flip);
      auto parsed = ParseVersionRecord(bad);
      ASSERT_FALSE(parsed.has_value()) << "byte " << i;
      EXPECT_TRUE(parsed.error().IsCorruption()) << parsed.error().ToString();
    }
  }
  EXPECT_FALSE(ParseVersionRecord(text.substr(0, text.size() - 1)).has_value());
  EXPECT_FALSE(ParseVersionRecord(text + "x").has_value());
}

TEST(VersionRecord, TotalsMustMatchTheSegments) {
  VersionRecord r = Sample();
  r.files += 1;
  EXPECT_TRUE(ParseVersionRecord(EncodeVersionRecord(r)).error().IsCorruption());
  r = Sample();
  r.parent = r.version;
  EXPECT_TRUE(ParseVersionRecord(EncodeVersionRecord(r)).error().IsCorruption());
}

TEST(VersionRecord, ANewerFormatIsUnsupportedNotCorrupt) {
  std::string body = "stoker-version 4\nwhatever\n";
  body += "record-crc32c " + fmt::format("{:08x}", crc32c::Value(body)) + "\n";
  EXPECT_EQ(ParseVersionRecord(body).error().code(), StatusCode::kUnsupported);
}

}  // namespace
}  // namespace stoker::format
