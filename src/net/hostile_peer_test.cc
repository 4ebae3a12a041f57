// Peers that break the protocol: each one loses its connection, and the server keeps serving
// everybody else.
#include <gtest/gtest.h>

#include "common/crc32c.h"
#include "net/net_test_util.h"
#include "net/payload.h"

#include <atomic>
#include <cstring>
#include <thread>

namespace stoker::net {
namespace {

using namespace std::chrono_literals;

class HostilePeerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    packed_ = test::PackRandomDir(5, 20);
    server_ = test::StartServer(test::TestServerOptions({{"ds", packed_->dir.path()}}));
    ASSERT_NE(server_, nullptr);
  }
  // A well-behaved client still gets served.
  void ExpectStillServing() {
    auto storage = OpenRemoteStorage(test::UriFor({server_.get()}, "ds"), test::kSecret,
                                     test::TestClientOptions());
    ASSERT_TRUE(storage.has_value());
    auto ds = Dataset::Open(*storage);
    ASSERT_TRUE(ds.has_value()) << ds.error().ToString();
    test::ExpectSameFiles(**ds, packed_->tree);
  }
  static std::string StatRequest(uint32_t id) {
    PayloadWriter w;
    w.String("ds").String("versions/0000000000000001.version");
    return EncodeFrame(MessageType::kStat, id, w.data());
  }

  std::unique_ptr<test::PackedDir> packed_;
  std::unique_ptr<server::Server> server_;
};

TEST_F(HostilePeerTest, GarbageBeforeTheHandshake) {
  Socket s = test::RawConnection(server_->port(), /*authenticate=*/false);
  ASSERT_TRUE(s.SendAll(std::string(64, 'G'), After(2s)).ok());
  EXPECT_TRUE(test::ClosedByPeer(s, 5000ms));
  ExpectStillServing();
  EXPECT_EQ(server_->metrics().handshake_failures.load(), 1u);
}

TEST_F(HostilePeerTest, OversizedHandshakeFrame) {
  Socket s = test::RawConnection(server_->port(), /*authenticate=*/false);
  ASSERT_TRUE(
      s.SendAll(EncodeFrame(MessageType::kHello, 0, std::string(300, 'x')), After(2s)).ok());
  EXPECT_TRUE(test::ClosedByPeer(s, 5000ms));
  ExpectStillServing();
}

TEST_F(HostilePeerTest, BadHeaderCrcAfterAuthentication) {
  Socket s = test::RawConnection(server_->port());
  std::string frame = StatRequest(1);
  frame[20] = static_cast<char>(frame[20] ^ 1);
  ASSERT_TRUE(s.SendAll(frame, After(2s)).ok());
  EXPECT_TRUE(test::ClosedByPeer(s, 5000ms));
  ExpectStillServing();
  EXPECT_EQ(server_->metrics().protocol_errors.load(), 1u);
}

TEST_F(HostilePeerTest, OversizedLengthIsRefusedWithoutReadingThePayload) {
  Socket s = test::RawConnection(server_->port());
  // A valid header announcing 1 GiB; the payload never comes.
  std::string payload = "x";
  auto header = EncodeHeader(MessageType::kRead, 1, std::as_bytes(std::span(payload.data(), 1)));
  std::string raw(reinterpret_cast<const char*>(header.data()), header.size());
  const uint32_t huge = 1u << 30;
  std::memcpy(raw.data() + 12, &huge, 4);
  const uint32_t crc = crc32c::Value(raw.data(), 20);
  std::memcpy(raw.data() + 20, &crc, 4);
  ASSERT_TRUE(s.SendAll(raw, After(2s)).ok());
  EXPECT_TRUE(test::ClosedByPeer(s, 5000ms));
  ExpectStillServing();
  EXPECT_EQ(server_->metrics().protocol_errors.load(), 1u);
}

TEST_F(HostilePeerTest, PayloadCrcMismatch) {
  Socket s = test::RawConnection(server_->port());
  std::string frame = StatRequest(1);
  frame.back() = static_cast<char>(frame.back() ^ 0x20);
  ASSERT_TRUE(s.SendAll(frame, After(2s)).ok());
  EXPECT_TRUE(test::ClosedByPeer(s, 5000ms));
  ExpectStillServing();
}

TEST_F(HostilePeerTest, MalformedPayloadGetsAnErrorAndTheConnectionClosed) {
  Socket s = test::RawConnection(server_->port());
  ASSERT_TRUE(WriteFrame(s, MessageType::kRead, 9, "\x05\x00ab", After(2s)).ok());
  auto answer = ReadFrame(s, kMaxAnswerFrame, After(2s));
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->message_type(), MessageType::kError);
  EXPECT_EQ(DecodeErrorPayload(answer->payload, "s").code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(test::ClosedByPeer(s, 5000ms));
}

TEST_F(HostilePeerTest, UnknownRequestTypesAreAnsweredNotFatal) {
  Socket s = test::RawConnection(server_->port());
  ASSERT_TRUE(WriteFrame(s, static_cast<MessageType>(99), 3, "", After(2s)).ok());
  auto answer = ReadFrame(s, kMaxAnswerFrame, After(2s));
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(DecodeErrorPayload(answer->payload, "s").code(), StatusCode::kUnsupported);
  ASSERT_TRUE(s.SendAll(StatRequest(4), After(2s)).ok());
  answer = ReadFrame(s, kMaxAnswerFrame, After(2s));
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->message_type(), MessageType::kStatOk);
}

TEST_F(HostilePeerTest, SlowLorisIsDroppedBeforeAndAfterAuthentication) {
  // frame_timeout and handshake_timeout are 500 ms in the test options.
  Socket before = test::RawConnection(server_->port(), /*authenticate=*/false);
  Socket after = test::RawConnection(server_->port());
  const std::string frame = StatRequest(1);
  ASSERT_TRUE(before.SendAll(std::string_view(frame).substr(0, 10), After(2s)).ok());
  ASSERT_TRUE(after.SendAll(std::string_view(frame).substr(0, 10), After(2s)).ok());
  EXPECT_TRUE(test::ClosedByPeer(before, 10000ms));
  EXPECT_TRUE(test::ClosedByPeer(after, 10000ms));
  ExpectStillServing();
  EXPECT_TRUE(test::Eventually([&] { return server_->metrics().protocol_errors.load() == 1; }));
}

TEST_F(HostilePeerTest, ReadPastTheEndIsAnError) {
  Socket s = test::RawConnection(server_->port());
  PayloadWriter w;
  w.String("ds").String("versions/0000000000000001.version").U64(1u << 20).U32(10);
  ASSERT_TRUE(WriteFrame(s, MessageType::kRead, 2, w.data(), After(2s)).ok());
  auto answer = ReadFrame(s, kMaxAnswerFrame, After(2s));
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->message_type(), MessageType::kError);
  PayloadWriter too_long;
  too_long.String("ds").String("versions/0000000000000001.version").U64(0).U32(kMaxReadLength + 1);
  ASSERT_TRUE(WriteFrame(s, MessageType::kRead, 3, too_long.data(), After(2s)).ok());
  answer = ReadFrame(s, kMaxAnswerFrame, After(2s));
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(DecodeErrorPayload(answer->payload, "s").code(), StatusCode::kInvalidArgument);
}

// A server of --max-connections 2, and the two raw connections that fill it.
class ConnectionLimit : public ::testing::Test {
 protected:
  struct Full {
    std::unique_ptr<server::Server> server;
    Socket a, b;
    std::string uri;
  };
  Full StartFull() {
    auto options = test::TestServerOptions({{"ds", packed_->dir.path()}});
    options.max_connections = 2;
    Full f;
    f.server = test::StartServer(options);
    f.a = test::RawConnection(f.server->port());
    f.b = test::RawConnection(f.server->port());
    f.uri = test::UriFor({f.server.get()}, "ds");
    return f;
  }
  std::unique_ptr<test::PackedDir> packed_ = test::PackRandomDir(6, 10);
};

TEST_F(ConnectionLimit, ConnectionsBeyondTheLimitAreRejected) {
  Full full = StartFull();
  auto storage = OpenRemoteStorage(full.uri, test::kSecret, test::TestClientOptions());
  auto ds = Dataset::Open(*storage);
  ASSERT_FALSE(ds.has_value());
  EXPECT_EQ(ds.error().code(), StatusCode::kUnavailable) << ds.error().ToString();
  EXPECT_NE(ds.error().message().find("too many connections"), std::string::npos)
      << ds.error().ToString();
  EXPECT_GE(full.server->metrics().connections_rejected.load(), 1u);
  // Room again once one leaves.
  full.a.Close();
  EXPECT_TRUE(
      test::Eventually([&] { return full.server->metrics().connections_open.load() == 1; }));
  auto again = Dataset::Open(*storage);
  EXPECT_TRUE(again.has_value()) << again.error().ToString();
}

// A client patient with a restarting server (reconnect_timeout, as users' stoker:// URIs are)
// is as patient with one at its connection limit: a moment's spike of clients costs a pause.
TEST_F(ConnectionLimit, APatientClientWaitsForRoomAsForARestart) {
  Full full = StartFull();
  ClientOptions client = test::TestClientOptions();
  client.reconnect_timeout = std::chrono::milliseconds(20000);
  auto storage = OpenRemoteStorage(full.uri, test::kSecret, client);
  std::thread leave([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    full.a.Close();
  });
  auto ds = Dataset::Open(*storage);
  leave.join();
  ASSERT_TRUE(ds.has_value()) << ds.error().ToString();
  EXPECT_GE(full.server->metrics().connections_rejected.load(), 1u);
  // Given up on at the reconnect deadline, the error says the server kept refusing.
  Full other = StartFull();
  client.reconnect_timeout = std::chrono::milliseconds(300);
  auto impatient = OpenRemoteStorage(other.uri, test::kSecret, client);
  auto refused = Dataset::Open(*impatient);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.error().message().find("kept refusing connections"), std::string::npos)
      << refused.error().ToString();
  EXPECT_NE(refused.error().message().find("too many connections"), std::string::npos);
}

TEST(ServerLimits, IdleConnectionsAreClosed) {
  auto packed = test::PackRandomDir(8, 10);
  auto options = test::TestServerOptions({{"ds", packed->dir.path()}});
  options.idle_timeout = 200ms;
  auto server = test::StartServer(options);
  Socket idle = test::RawConnection(server->port());
  EXPECT_TRUE(test::ClosedByPeer(idle, 5000ms));
  EXPECT_TRUE(test::Eventually([&] { return server->metrics().idle_closed.load() == 1; }));
}

// Answers bigger than half the memory limit cannot be held two at a time: concurrent readers
// wait for each other's answers to be sent, and every one of them still gets its bytes.
TEST(ServerLimits, AnswersWaitForRoomUnderTheMemoryLimit) {
  stoker::test::TempDir dir;
  stoker::test::Tree tree;
  tree.files["big.bin"] = stoker::test::RandomBytes(3, 12u << 20);
  {
    dataset::PackOptions po;
    auto source = stoker::test::TreeSource(tree);
    auto storage = storage::NewPosixStorage(dir.path());
    ASSERT_TRUE(dataset::Pack(*source, *storage, po).has_value());
  }
  auto options = test::TestServerOptions({{"ds", dir.path()}});
  options.memory_limit = kMaxAnswerFrame;  // the least it may be
  options.frame_timeout = 10000ms;
  auto server = test::StartServer(options);
  std::vector<std::thread> readers;
  std::atomic<int> right{0};
  readers.reserve(4);
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&] {
      auto storage = OpenRemoteStorage(test::UriFor({server.get()}, "ds"), test::kSecret,
                                       test::TestClientOptions());
      auto ds = Dataset::Open(*storage);
      if (!ds) return;
      for (int i = 0; i < 3; ++i) {
        auto bytes = (*ds)->ReadFile(0);
        if (bytes && stoker::test::AsString(*bytes) == tree.files["big.bin"]) right.fetch_add(1);
      }
    });
  }
  for (auto& t : readers) t.join();
  EXPECT_EQ(right.load(), 12);
  EXPECT_LE(server->metrics().memory_peak.load(), kMaxAnswerFrame);
  EXPECT_GT(server->metrics().memory_waits.load(), 0u);
}

TEST(Connect, NamesResolveAndUnknownNamesAreClearErrors) {
  auto packed = test::PackRandomDir(9, 5);
  auto server = test::StartServer(test::TestServerOptions({{"ds", packed->dir.path()}}));
  // A name goes through the bounded (threaded) lookup; an IP literal does not need it.
  EXPECT_TRUE(Connect("localhost", server->port(), After(5000ms)).has_value());
  EXPECT_TRUE(Connect("127.0.0.1", server->port(), After(5000ms)).has_value());
  // An unknown name fails (at the latest at the deadline) and says which name.
  auto bad = Connect("no-such-host.invalid", server->port(), After(2000ms));
  ASSERT_FALSE(bad.has_value());
  EXPECT_TRUE(bad.error().IsUnavailable() || bad.error().IsTimeout()) << bad.error().ToString();
  EXPECT_NE(bad.error().message().find("no-such-host.invalid"), std::string::npos);
}

TEST(ServerOptions, BadConfigurationsAreClearErrors) {
  auto packed = test::PackRandomDir(7, 5);
  auto o = test::TestServerOptions({{"ds", packed->dir.path()}});
  o.secret = "short";
  EXPECT_EQ(server::Server::Start(o).error().code(), StatusCode::kInvalidArgument);
  o = test::TestServerOptions({{"ds", "/nonexistent/dir"}});
  auto missing = server::Server::Start(o);
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.error().message().find("/nonexistent/dir"), std::string::npos);
  auto first = test::StartServer(test::TestServerOptions({{"ds", packed->dir.path()}}));
  o = test::TestServerOptions({{"ds", packed->dir.path()}});
  o.port = first->port();
  auto clash = server::Server::Start(o);
  ASSERT_FALSE(clash.has_value());
  EXPECT_EQ(clash.error().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(clash.error().message().find("already in use"), std::string::npos);
}

}  // namespace
}  // namespace stoker::net
