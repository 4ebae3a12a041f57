#include "format/manifest.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cctype>

#include "common/crc32c.h"

namespace stoker::format {
namespace {

Manifest Sample() {
  Manifest m;
  m.version = 3;
  m.snapshot_path = "snapshots/0000000000000003.snap";
  m.snapshot_bytes = 123456;
  m.snapshot_crc32c = 0x0a2b3c4d;
  return m;
}

// A manifest body with a correct final CRC line, so the parser's field checks (not the CRC)
// are what rejects it.
std::string Sign(const std::string& body) {
  return body + fmt::format("manifest-crc32c {:08x}\n", crc32c::Value(body));
}

std::string Body(std::string_view format = "1", std::string_view version = "3",
                 std::string_view path = "snapshots/0000000000000003.snap",
                 std::string_view bytes = "123456", std::string_view crc = "0a2b3c4d") {
  return fmt::format(
      "stoker-manifest {}\nversion {}\nsnapshot {}\nsnapshot-bytes {}\n"
      "snapshot-crc32c {}\n",
      format, version, path, bytes, crc);
}

TEST(Manifest, EncodesTheDocumentedText) {
  EXPECT_EQ(EncodeManifest(Sample()), Sign(Body()));
  EXPECT_TRUE(EncodeManifest(Sample()).starts_with(
      "stoker-manifest 1\nversion 3\nsnapshot snapshots/0000000000000003.snap\n"
      "snapshot-bytes 123456\nsnapshot-crc32c 0a2b3c4d\nmanifest-crc32c "));
}

TEST(Manifest, RoundTrip) {
  for (uint64_t version : {1ull, 2ull, 1000ull, ~0ull}) {
    Manifest m = Sample();
    m.version = version;
    m.snapshot_crc32c = static_cast<uint32_t>(version * 2654435761u);
    m.snapshot_bytes = version * 7;
    auto parsed = ParseManifest(EncodeManifest(m));
    ASSERT_TRUE(parsed.has_value()) << parsed.error().ToString();
    EXPECT_EQ(parsed->version, m.version);
    EXPECT_EQ(parsed->snapshot_path, m.snapshot_path);
    EXPECT_EQ(parsed->snapshot_bytes, m.snapshot_bytes);
    EXPECT_EQ(parsed->snapshot_crc32c, m.snapshot_crc32c);
  }
}

TEST(Manifest, SignedBodyParses) {
  // The test's own signing agrees with the encoder, so the rejections below are about content.
  EXPECT_TRUE(ParseManifest(Sign(Body())).has_value());
}

TEST(Manifest, EveryTruncationIsRejected) {
  const std::string good = EncodeManifest(Sample());
  for (size_t n = 0; n < good.size(); ++n) {
    auto parsed = ParseManifest(good.substr(0, n));
    ASSERT_FALSE(parsed.has_value()) << n;
    EXPECT_TRUE(parsed.error().IsCorruption()) << n << ": " << parsed.error().ToString();
  }
}

TEST(Manifest, EveryByteChangeIsRejected) {
  const std::string good = EncodeManifest(Sample());
  for (size_t i = 0; i < good.size(); ++i) {
    for (unsigned char mask : {0x01, 0x20, 0x40}) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ mask);
      auto parsed = ParseManifest(bad);
      ASSERT_FALSE(parsed.has_value()) << "byte " << i << " mask " << int(mask);
      EXPECT_TRUE(parsed.error().IsCorruption()) << parsed.error().ToString();
    }
  }
}

TEST(Manifest, WrongCrcIsRejected) {
  const std::string good = EncodeManifest(Sample());
  const auto at = good.rfind(' ') + 1;
  std::string bad = good;
  bad[at] = bad[at] == '0' ? '1' : '0';
  auto parsed = ParseManifest(bad);
  ASSERT_FALSE(parsed.has_value());
  EXPECT_NE(parsed.error().message().find("CRC32C mismatch"), std::string::npos);
}

TEST(Manifest, ExtraBytesAreRejected) {
  const std::string good = EncodeManifest(Sample());
  for (const std::string& tail : std::vector<std::string>{
           "x", "\n", " ", "manifest-crc32c 00000000\n", std::string(1, '\0')}) {
    auto parsed = ParseManifest(good + tail);
    ASSERT_FALSE(parsed.has_value()) << tail;
    EXPECT_TRUE(parsed.error().IsCorruption());
  }
  EXPECT_FALSE(ParseManifest(std::string(kMaxManifestSize + 1, 'a')).has_value());
}

TEST(Manifest, EachMalformedLineIsRejectedEvenWithAValidCrc) {
  const std::vector<std::string> bad_bodies = {
      // first line
      Body("2"),
      Body(""),
      Body("01"),
      // NOLINTNEXTLINE(bugprone-suspicious-missing-comma): one body, split over two lines
      "stoker-manifst 1\nversion 3\nsnapshot snapshots/a\nsnapshot-bytes 1\nsnapshot-crc32c "
      "00000000\n",
      // version
      Body("1", "03"),
      Body("1", ""),
      Body("1", "-3"),
      Body("1", "3x"),
      Body("1", "0x3"),
      Body("1", " 3"),
      Body("1", "18446744073709551616"),
      // snapshot path
      Body("1", "3", "../x"),
      Body("1", "3", "snapshots/../MANIFEST"),
      Body("1", "3", "/etc/passwd"),
      Body("1", "3", "snapshots/"),
      Body("1", "3", "snapshots/a/b"),
      Body("1", "3", "chunks/x"),
      Body("1", "3", "snapshots/A.snap"),
      Body("1", "3", "snapshots/x y"),
      Body("1", "3", "snapshots/" + std::string(200, 'a')),
      Body("1", "3", ""),
      // snapshot-bytes
      Body("1", "3", "snapshots/a", "012"),
      Body("1", "3", "snapshots/a", ""),
      Body("1", "3", "snapshots/a", "12 "),
      Body("1", "3", "snapshots/a", "+12"),
      // snapshot-crc32c: exactly 8 lowercase hex digits
      Body("1", "3", "snapshots/a", "1", "0a2b3c4"),
      Body("1", "3", "snapshots/a", "1", "0a2b3c4dd"),
      Body("1", "3", "snapshots/a", "1", "0a2b3c4g"),
      Body("1", "3", "snapshots/a", "1", "-a2b3c4d"),
      // fields out of order, missing, or duplicated
      "stoker-manifest 1\nsnapshot snapshots/a\nversion 3\nsnapshot-bytes 1\nsnapshot-crc32c "
      "00000000\n",
      "stoker-manifest 1\nversion 3\nsnapshot-bytes 1\nsnapshot-crc32c 00000000\n",
      "stoker-manifest 1\nversion 3\nversion 3\nsnapshot snapshots/a\nsnapshot-bytes 1\n"
      "snapshot-crc32c 00000000\n",
      // a separator other than one space, CRLF line ends
      "stoker-manifest 1\nversion  3\nsnapshot snapshots/a\nsnapshot-bytes 1\nsnapshot-crc32c "
      "00000000\n",
      "stoker-manifest 1\r\nversion 3\r\nsnapshot snapshots/a\r\nsnapshot-bytes 1\r\n"
      "snapshot-crc32c 00000000\r\n",
  };
  for (const auto& body : bad_bodies) {
    auto parsed = ParseManifest(Sign(body));
    EXPECT_FALSE(parsed.has_value()) << body;
  }
  // A future format version is Unsupported, not Corruption.
  auto future = ParseManifest(Sign(Body("2")));
  ASSERT_FALSE(future.has_value());
  EXPECT_EQ(future.error().code(), StatusCode::kUnsupported);
}

TEST(Manifest, DamagedFormatLineIsCorruptionNotANewerFormat) {
  std::string bad = EncodeManifest(Sample());
  bad[16] = '0';  // "stoker-manifest 0", CRC line left as it was
  auto parsed = ParseManifest(bad);
  ASSERT_FALSE(parsed.has_value());
  EXPECT_TRUE(parsed.error().IsCorruption()) << parsed.error().ToString();
  // The same line in a manifest whose CRC line is intact means a newer format.
  EXPECT_EQ(ParseManifest(Sign(Body("0"))).error().code(), StatusCode::kUnsupported);
  EXPECT_TRUE(ParseManifest("stoker-manifest 2\n").error().IsCorruption());
}

TEST(Manifest, UppercaseHexIsRejected) {
  // Hex is lowercase only; otherwise a flipped 0x20 bit in the final CRC line (which no CRC
  // covers) would turn 'a' into 'A' and still parse to the same value.
  EXPECT_FALSE(ParseManifest(Sign(Body("1", "3", "snapshots/a", "1", "0A2B3C4D"))).has_value());
  const std::string body = Body();
  const std::string good = Sign(body);
  std::string upper = good;
  for (size_t i = good.rfind(' ') + 1; i < upper.size(); ++i) {
    upper[i] = static_cast<char>(std::toupper(static_cast<unsigned char>(upper[i])));
  }
  ASSERT_NE(upper, good) << "pick a sample whose CRC has a hex letter";
  EXPECT_FALSE(ParseManifest(upper).has_value());
}

}  // namespace
}  // namespace stoker::format
