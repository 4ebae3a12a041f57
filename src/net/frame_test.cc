#include "net/frame.h"

#include <gtest/gtest.h>

#include "common/crc32c.h"
#include "net/payload.h"
#include "net/protocol.h"
#include "net/uri.h"

namespace stoker::net {
namespace {

std::span<const std::byte, kHeaderSize> HeaderOf(const std::string& frame) {
  return std::span<const std::byte, kHeaderSize>(reinterpret_cast<const std::byte*>(frame.data()),
                                                 kHeaderSize);
}

TEST(Frame, RoundTripsAndMatchesTheSpecLayout) {
  const std::string frame = EncodeFrame(MessageType::kRead, 0xA1B2C3D4, "payload");
  ASSERT_EQ(frame.size(), kHeaderSize + 7);
  EXPECT_EQ(frame.substr(0, 4), "STKF");
  EXPECT_EQ(static_cast<uint8_t>(frame[4]), 18);
  auto h = DecodeHeader(HeaderOf(frame), 100);
  ASSERT_TRUE(h.has_value()) << h.error().ToString();
  EXPECT_EQ(h->type, 18);
  EXPECT_EQ(h->request_id, 0xA1B2C3D4u);
  EXPECT_EQ(h->length, 7u);
  EXPECT_EQ(h->payload_crc, crc32c::Value(std::string_view("payload")));
  EXPECT_TRUE(CheckPayload(*h, frame.substr(kHeaderSize)).ok());
  EXPECT_TRUE(CheckPayload(*h, "paXload").IsCorruption());
}

TEST(Frame, RejectsEveryDamagedHeaderByte) {
  const std::string good = EncodeFrame(MessageType::kStat, 7, "abc");
  for (size_t i = 0; i < kHeaderSize; ++i) {
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x10);
    auto h = DecodeHeader(HeaderOf(bad), 1 << 20);
    EXPECT_FALSE(h.has_value()) << "byte " << i;
    if (!h) {
      EXPECT_EQ(h.error().code(), StatusCode::kCorruption) << "byte " << i;
    }
  }
}

TEST(Frame, RefusesLengthsOverTheLimit) {
  const std::string frame = EncodeFrame(MessageType::kData, 1, std::string(300, 'x'));
  EXPECT_TRUE(DecodeHeader(HeaderOf(frame), 300).has_value());
  auto h = DecodeHeader(HeaderOf(frame), kMaxHandshakeFrame);
  ASSERT_FALSE(h.has_value());
  EXPECT_EQ(h.error().code(), StatusCode::kResourceExhausted);
}

TEST(Payload, CodecsRoundTripAndNeverOverrun) {
  PayloadWriter w;
  w.U8(9)
      .U16(0xBEEF)
      .U32(123456)
      .U64(uint64_t{1} << 40)
      .String("héllo")
      .Bytes(std::string(3, '\0'));
  ASSERT_TRUE(w.status().ok());
  const std::string data = w.data();
  PayloadReader r(data);
  EXPECT_EQ(*r.U8(), 9);
  EXPECT_EQ(*r.U16(), 0xBEEF);
  EXPECT_EQ(*r.U32(), 123456u);
  EXPECT_EQ(*r.U64(), uint64_t{1} << 40);
  EXPECT_EQ(*r.String(), "héllo");
  EXPECT_EQ(*r.Bytes(), std::string(3, '\0'));
  EXPECT_TRUE(r.ExpectEnd().ok());
  // Every truncation fails cleanly somewhere.
  for (size_t n = 0; n < data.size(); ++n) {
    PayloadReader t(std::string_view(data).substr(0, n));
    const bool ok = t.U8() && t.U16() && t.U32() && t.U64() && t.String() && t.Bytes();
    EXPECT_FALSE(ok) << n;
  }
  PayloadWriter too_long;
  too_long.String(std::string(70000, 'a'));
  EXPECT_EQ(too_long.status().code(), StatusCode::kInvalidArgument);
}

TEST(Payload, ErrorPayloadsRoundTrip) {
  const Status st = Status::NotFound("no such chunk");
  const Status back = DecodeErrorPayload(EncodeErrorPayload(st), "peer");
  EXPECT_EQ(back.code(), StatusCode::kNotFound);
  EXPECT_EQ(back.message(), "no such chunk");
  EXPECT_TRUE(DecodeErrorPayload(std::string(1, '\x63'), "peer").IsCorruption());
}

TEST(Protocol, ValidatePath) {
  for (const char* ok : {"MANIFEST", "snapshots/v1.snap", "chunks/00ab.chunk", "a/b c/d.e"}) {
    EXPECT_TRUE(ValidatePath(ok, false).ok()) << ok;
  }
  EXPECT_TRUE(ValidatePath("", true).ok());
  for (std::string_view bad :
       std::initializer_list<std::string_view>{"", "/etc/passwd", "../x", "a/../b", "./a", "a//b",
                                               "a/", "a/.", std::string_view("a\0b", 3)}) {
    const Status st = ValidatePath(bad, false);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(Uri, ParsesServerListsAndNames) {
  auto u = ParseStokerUri("stoker://127.0.0.1:7070,host-b:9000,[::1]:1/imagenet/");
  ASSERT_TRUE(u.has_value()) << u.error().ToString();
  ASSERT_EQ(u->servers.size(), 3u);
  EXPECT_EQ(u->servers[0].host, "127.0.0.1");
  EXPECT_EQ(u->servers[1].port, 9000);
  EXPECT_EQ(u->servers[2].host, "::1");
  EXPECT_EQ(u->dataset, "imagenet");
  EXPECT_EQ(u->ToString(), "stoker://127.0.0.1:7070,host-b:9000,[::1]:1/imagenet");
  EXPECT_EQ(ParseStokerUri("stoker://h/x")->servers[0].port, kDefaultPort);
  for (const char* bad : {"stoker://h:1", "stoker://h:1/", "stoker://:1/x", "stoker://h:x/x",
                          "stoker://h:99999/x", "stoker://h:1/a/b", "stoker://h:1,/x",
                          "stoker://::1:5/x", "stoker://[[x]:1/d", "stoker://h st:1/d"}) {
    EXPECT_EQ(ParseStokerUri(bad).error().code(), StatusCode::kInvalidArgument) << bad;
  }
  // The message quotes the whole address, port included.
  EXPECT_EQ(ParseServerAddress("127.0.0.1:99999").error().message(),
            "bad server address '127.0.0.1:99999': port must be a number from 0 to 65535");
}

}  // namespace
}  // namespace stoker::net
