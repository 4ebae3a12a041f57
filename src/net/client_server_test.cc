// End-to-end: a server in this process on an ephemeral port, datasets read back through
// stoker:// storage, Dataset and ReadPipeline.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "format/chunk.h"
#include "loader/read_pipeline.h"
#include "net/client.h"
#include "net/net_test_util.h"
#include "net/payload.h"

namespace stoker::net {
namespace {

using test::kSecret;

class ClientServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    packed_ = test::PackRandomDir(11);
    server_ = test::StartServer(test::TestServerOptions({{"ds", packed_->dir.path()}}));
    ASSERT_NE(server_, nullptr);
    uri_ = test::UriFor({server_.get()}, "ds");
  }
  std::shared_ptr<Storage> Open(std::string secret = kSecret) {
    auto s = OpenRemoteStorage(uri_, std::move(secret), test::TestClientOptions());
    EXPECT_TRUE(s.has_value()) << s.error().ToString();
    return s ? *s : nullptr;
  }

  std::unique_ptr<test::PackedDir> packed_;
  std::unique_ptr<server::Server> server_;
  std::string uri_;
};

TEST_F(ClientServerTest, ServesEveryFileAndListing) {
  auto ds = Dataset::Open(Open());
  ASSERT_TRUE(ds.has_value()) << ds.error().ToString();
  test::ExpectSameFiles(**ds, packed_->tree);
  for (const std::string& dir : packed_->tree.Dirs()) {
    auto entries = (*ds)->List(dir);
    ASSERT_TRUE(entries.has_value()) << dir;
    const auto want = packed_->tree.Listing(dir);
    ASSERT_EQ(entries->size(), want.size()) << dir;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ((*entries)[i].name, want[i].first);
      EXPECT_EQ((*entries)[i].is_dir, want[i].second);
    }
  }
  EXPECT_GT(server_->metrics().requests(server::ServerMetrics::kRead), 0u);
  EXPECT_EQ(server_->metrics().auth_failures.load(), 0u);
}

TEST_F(ClientServerTest, OpenByUriTakesTheSecretFromTheEnvironment) {
  ::unsetenv("STOKER_SECRET_FILE");
  ::unsetenv("STOKER_SECRET");
  auto missing = Dataset::Open(uri_);
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.error().message().find("STOKER_SECRET"), std::string::npos);

  stoker::test::TempDir dir;
  stoker::test::WriteStringToFile(dir.Join("secret"), kSecret + "\n");
  ::setenv("STOKER_SECRET_FILE", dir.Join("secret").c_str(), 1);
  // Readable by others (the umask's 0644): refused, as ssh refuses such a private key.
  ASSERT_EQ(::chmod(dir.Join("secret").c_str(), 0644), 0);
  auto exposed = Dataset::Open(uri_);
  ASSERT_FALSE(exposed.has_value());
  EXPECT_NE(exposed.error().message().find("chmod 600"), std::string::npos)
      << exposed.error().ToString();
  ASSERT_EQ(::chmod(dir.Join("secret").c_str(), 0600), 0);
  auto ds = Dataset::Open(uri_);
  ::unsetenv("STOKER_SECRET_FILE");
  ASSERT_TRUE(ds.has_value()) << ds.error().ToString();
  test::ExpectSameFiles(**ds, packed_->tree);

  ::setenv("STOKER_SECRET", "short", 1);
  auto too_short = Dataset::Open(uri_);
  ::unsetenv("STOKER_SECRET");
  ASSERT_FALSE(too_short.has_value());
  EXPECT_EQ(too_short.error().code(), StatusCode::kInvalidArgument);
}

// A program that holds the secret itself passes it (and a deadline) as options, whatever the
// environment says; a bad option is refused by name.
TEST_F(ClientServerTest, OpenStorageTakesTheSecretAndDeadlineAsOptions) {
  ::unsetenv("STOKER_SECRET_FILE");
  ::setenv("STOKER_SECRET", "this-is-not-the-server-secret-at-all!", 1);
  ::setenv("STOKER_TIMEOUT", "not-a-duration", 1);
  StorageOptions options;
  options.secret = kSecret;
  options.request_timeout = std::chrono::seconds(5);
  auto storage = OpenStorage(uri_, options);
  ASSERT_TRUE(storage.has_value()) << storage.error().ToString();
  auto ds = Dataset::Open(*storage);
  ASSERT_TRUE(ds.has_value()) << ds.error().ToString();
  test::ExpectSameFiles(**ds, packed_->tree);

  // Unset options come from the environment: here a bad $STOKER_TIMEOUT, named.
  options.request_timeout.reset();
  auto bad_timeout = OpenStorage(uri_, options);
  ASSERT_FALSE(bad_timeout.has_value());
  EXPECT_NE(bad_timeout.error().message().find("STOKER_TIMEOUT"), std::string::npos);
  ::unsetenv("STOKER_TIMEOUT");
  options.request_timeout = std::chrono::milliseconds(0);
  EXPECT_EQ(OpenStorage(uri_, options).error().code(), StatusCode::kInvalidArgument);
  // The environment's (wrong) secret when the options give none: connections are made on the
  // first request, whose handshake fails.
  options.request_timeout.reset();
  options.secret.reset();
  auto wrong = OpenStorage(uri_, options);
  ASSERT_TRUE(wrong.has_value()) << wrong.error().ToString();
  EXPECT_FALSE(Dataset::Open(*wrong).has_value());
  ::unsetenv("STOKER_SECRET");
}

TEST_F(ClientServerTest, ReadPipelineUsesTheThreadEngine) {
  auto opened = Dataset::Open(Open());
  ASSERT_TRUE(opened.has_value());
  std::shared_ptr<const Dataset> ds = std::move(*opened);
  std::vector<uint32_t> plan(ds->sample_count());
  for (uint32_t i = 0; i < plan.size(); ++i) plan[i] = (i * 7919) % plan.size();
  loader::ReadPipelineOptions o;
  o.memory_budget_bytes = 256 << 10;
  auto pipeline = loader::ReadPipeline::Start(ds, plan, o);
  ASSERT_TRUE(pipeline.has_value()) << pipeline.error().ToString();
  for (uint64_t i = 0; i < plan.size(); ++i) {
    auto item = (*pipeline)->Next();
    ASSERT_TRUE(item.has_value()) << item.error().ToString();
    ASSERT_TRUE(item->has_value());
    const loader::SampleData& s = **item;
    ASSERT_TRUE(s.status.ok()) << s.status.ToString();
    ASSERT_EQ(s.files.size(), 1u);
    const std::string path = ds->FilePath(s.files[0].index);
    EXPECT_EQ(std::string_view(reinterpret_cast<const char*>(s.files[0].bytes.data()),
                               s.files[0].bytes.size()),
              packed_->tree.files.at(path))
        << path;
  }
  auto end = (*pipeline)->Next();
  ASSERT_TRUE(end.has_value());
  EXPECT_FALSE(end->has_value());
}

TEST_F(ClientServerTest, ConcurrentReadersGetTheirOwnConnections) {
  auto uri = ParseStokerUri(uri_);
  auto client = Client::Create(*uri, kSecret, test::TestClientOptions());
  ASSERT_TRUE(client.has_value());
  auto opened = Dataset::Open(NewRemoteStorage(*client));
  ASSERT_TRUE(opened.has_value());
  const Dataset& ds = **opened;
  // Sequential reads reuse one connection.
  for (uint32_t f = 0; f < ds.file_count(); ++f) ASSERT_TRUE(ds.ReadFile(f).has_value());
  EXPECT_EQ((*client)->connections_opened(), 1u);

  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  threads.reserve(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (uint32_t f = static_cast<uint32_t>(t); f < ds.file_count(); f += 3) {
        auto bytes = ds.ReadFile(f);
        if (!bytes || stoker::test::AsString(*bytes) != packed_->tree.files.at(ds.FilePath(f))) {
          failures.fetch_add(1);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_LE((*client)->connections_opened(), 9u);
}

TEST_F(ClientServerTest, LargeReadsAreSplitAndExact) {
  stoker::test::TempDir dir;
  const std::string big = stoker::test::RandomBytes(3, (16u << 20) + 12345);
  stoker::test::WriteStringToFile(packed_->dir.Join("big.bin"), big);
  auto storage = Open();
  auto file = storage->OpenRead("big.bin");
  ASSERT_TRUE(file.has_value()) << file.error().ToString();
  EXPECT_EQ((*file)->Size(), big.size());
  std::string got(big.size() - 10, '\0');
  ASSERT_TRUE((*file)->ReadAt(5, std::as_writable_bytes(std::span(got.data(), got.size()))).ok());
  EXPECT_TRUE(got == big.substr(5, big.size() - 10));
  auto mapped = storage->Map("big.bin");
  ASSERT_TRUE(mapped.has_value());
  EXPECT_EQ((*mapped)->bytes().size(), big.size());
  // Past the end: an error, never a short success.
  std::string past(20, '\0');
  const Status st =
      (*file)->ReadAt(big.size() - 10, std::as_writable_bytes(std::span(past.data(), past.size())));
  EXPECT_EQ(st.code(), StatusCode::kIOError);
  EXPECT_NE(st.message().find("stoker://127.0.0.1:"), std::string::npos) << st.ToString();
}

TEST_F(ClientServerTest, WrongClientSecretIsRefusedAndNothingIsServed) {
  auto storage = Open("a different secret, long enough");
  auto ds = Dataset::Open(storage);
  ASSERT_FALSE(ds.has_value());
  EXPECT_EQ(ds.error().code(), StatusCode::kPermissionDenied) << ds.error().ToString();
  EXPECT_NE(ds.error().message().find("127.0.0.1:" + std::to_string(server_->port())),
            std::string::npos)
      << ds.error().ToString();
  EXPECT_NE(ds.error().message().find("secrets differ"), std::string::npos);
  // The client noticed first (the server's proof did not match) and hung up without a word, not
  // retried; the server counts that as one wrong secret.
  EXPECT_TRUE(test::Eventually([&] { return server_->metrics().auth_failures.load() == 1; }));
  EXPECT_EQ(server_->metrics().handshake_failures.load(), 0u);
  EXPECT_EQ(server_->metrics().requests(server::ServerMetrics::kStat), 0u);
  EXPECT_EQ(server_->metrics().requests(server::ServerMetrics::kRead), 0u);
}

TEST_F(ClientServerTest, AClientWithoutTheSecretCannotAuthenticate) {
  // A peer that ignores the server's proof and guesses its own.
  Socket s = test::RawConnection(server_->port(), /*authenticate=*/false);
  PayloadWriter hello;
  hello.U16(kProtocolVersion).Raw(std::string(kNonceSize, 'n'));
  ASSERT_TRUE(
      WriteFrame(s, MessageType::kHello, 0, hello.data(), After(std::chrono::seconds(2))).ok());
  auto challenge = ReadFrame(s, kMaxHandshakeFrame, After(std::chrono::seconds(2)));
  ASSERT_TRUE(challenge.has_value());
  EXPECT_EQ(challenge->message_type(), MessageType::kChallenge);
  ASSERT_TRUE(WriteFrame(s, MessageType::kAuth, 0, std::string(kProofSize, 'p'),
                         After(std::chrono::seconds(2)))
                  .ok());
  auto answer = ReadFrame(s, kMaxHandshakeFrame, After(std::chrono::seconds(2)));
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->message_type(), MessageType::kError);
  EXPECT_EQ(DecodeErrorPayload(answer->payload, "s").code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(test::ClosedByPeer(s, std::chrono::milliseconds(5000)));
  EXPECT_EQ(server_->metrics().auth_failures.load(), 1u);
}

TEST_F(ClientServerTest, RogueServerIsDetectedBeforeAnyRequest) {
  auto rogue_options = test::TestServerOptions({{"ds", packed_->dir.path()}});
  rogue_options.secret = "the rogue server's own secret";
  auto rogue = test::StartServer(rogue_options);
  auto storage =
      OpenRemoteStorage(test::UriFor({rogue.get()}, "ds"), kSecret, test::TestClientOptions());
  ASSERT_TRUE(storage.has_value());
  auto ds = Dataset::Open(*storage);
  ASSERT_FALSE(ds.has_value());
  EXPECT_EQ(ds.error().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(ds.error().message().find("secrets differ"), std::string::npos)
      << ds.error().ToString();
  EXPECT_EQ(rogue->metrics().requests(server::ServerMetrics::kStat), 0u);
  EXPECT_EQ(rogue->metrics().requests(server::ServerMetrics::kRead), 0u);
  // The client hung up on finding the proof wrong, before AUTH: the server counts that as a
  // wrong secret too (an operator's dashboard sees clients of another deployment).
  EXPECT_TRUE(test::Eventually([&] { return rogue->metrics().auth_failures.load() >= 1; }));
  EXPECT_EQ(rogue->metrics().handshake_failures.load(), 0u);
}

TEST_F(ClientServerTest, PathEscapesAreInvalidArguments) {
  auto storage = Open();
  for (const char* bad : {"../x", "/etc/passwd", "chunks/../../x", "a//b"}) {
    auto file = storage->OpenRead(bad);
    ASSERT_FALSE(file.has_value()) << bad;
    EXPECT_EQ(file.error().code(), StatusCode::kInvalidArgument) << bad;
  }
  // The server checks too: a raw request that skips the client's check.
  Socket s = test::RawConnection(server_->port());
  for (const char* bad : {"../x", "/etc/passwd", "snapshots/../../../etc/passwd"}) {
    PayloadWriter w;
    w.String("ds").String(bad);
    ASSERT_TRUE(
        WriteFrame(s, MessageType::kStat, 5, w.data(), After(std::chrono::seconds(2))).ok());
    auto answer = ReadFrame(s, kMaxAnswerFrame, After(std::chrono::seconds(2)));
    ASSERT_TRUE(answer.has_value()) << answer.error().ToString();
    EXPECT_EQ(answer->message_type(), MessageType::kError);
    EXPECT_EQ(answer->request_id, 5u);
    EXPECT_EQ(DecodeErrorPayload(answer->payload, "server").code(), StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(server_->metrics().errors(StatusCode::kInvalidArgument), 3u);
}

// A symbolic link planted in a served dataset (to a file or a directory outside it) is refused:
// the server never follows one out of the dataset directory.
TEST_F(ClientServerTest, SymbolicLinksAreNotServed) {
  stoker::test::TempDir outside;
  stoker::test::WriteStringToFile(outside.Join("secret.txt"), "not for clients");
  std::filesystem::create_symlink(outside.Join("secret.txt"), packed_->dir.Join("chunks/link"));
  std::filesystem::create_directory_symlink(outside.path(), packed_->dir.Join("outside"));
  auto storage = Open();
  for (const char* path : {"chunks/link", "outside/secret.txt"}) {
    auto file = storage->OpenRead(path);
    ASSERT_FALSE(file.has_value()) << path;
    EXPECT_EQ(file.error().code(), StatusCode::kPermissionDenied) << file.error().ToString();
  }
  auto listing = storage->List("outside");
  ASSERT_FALSE(listing.has_value());
  EXPECT_EQ(listing.error().code(), StatusCode::kPermissionDenied);
}

TEST_F(ClientServerTest, UnknownDatasetsAndFilesAreNotFound) {
  auto storage =
      OpenRemoteStorage(test::UriFor({server_.get()}, "nope"), kSecret, test::TestClientOptions());
  ASSERT_TRUE(storage.has_value());
  auto ds = Dataset::Open(*storage);
  ASSERT_FALSE(ds.has_value());
  EXPECT_EQ(ds.error().code(), StatusCode::kNotFound) << ds.error().ToString();
  auto file = Open()->OpenRead("chunks/does-not-exist");
  ASSERT_FALSE(file.has_value());
  EXPECT_EQ(file.error().code(), StatusCode::kNotFound);
  EXPECT_NE(file.error().message().find("/ds/chunks/does-not-exist"), std::string::npos)
      << file.error().ToString();
  EXPECT_EQ(*Open()->Exists("chunks/does-not-exist"), false);
  EXPECT_EQ(*Open()->Exists("versions/0000000000000001.version"), true);
}

TEST_F(ClientServerTest, AReadOnlyServerRefusesWrites) {
  auto storage = Open();
  auto created = storage->Create("chunks/x");
  ASSERT_TRUE(created.has_value());  // nothing is sent until there are bytes or a Close
  ASSERT_TRUE((*created)->Append(std::as_bytes(std::span("abc", 3))).ok());
  const Status closed = (*created)->Close();
  EXPECT_EQ(closed.code(), StatusCode::kPermissionDenied) << closed.ToString();
  EXPECT_NE(closed.message().find("--writable"), std::string::npos) << closed.ToString();
  EXPECT_EQ(storage->CreateExclusive("versions/x", std::as_bytes(std::span("abc", 3))).code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(storage->Rename("chunks/a", "chunks/b").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(storage->Remove("versions/0000000000000001.version").code(),
            StatusCode::kPermissionDenied);
  EXPECT_TRUE(*storage->Exists("versions/0000000000000001.version"));
  EXPECT_EQ(storage->Describe("chunks/x"), uri_ + "/chunks/x");
}

TEST_F(ClientServerTest, CorruptBytesOnTheServerAreCaughtByTheSnapshotCrc) {
  auto opened = Dataset::Open(Open());
  ASSERT_TRUE(opened.has_value());
  const Dataset& ds = **opened;
  // Flip a byte inside the largest file, in place on the server's disk.
  uint32_t victim = 0;
  for (uint32_t f = 0; f < ds.file_count(); ++f) {
    if (ds.Stat(f)->size > ds.Stat(victim)->size) victim = f;
  }
  const FileInfo info = *ds.Stat(victim);
  const std::string chunk = packed_->dir.Join(format::ChunkPath(info.chunk_id));
  {
    std::fstream f(chunk, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.is_open()) << chunk;
    f.seekg(static_cast<std::streamoff>(info.offset + info.size / 2));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x40);
    f.seekp(static_cast<std::streamoff>(info.offset + info.size / 2));
    f.write(&c, 1);
  }
  auto bytes = ds.ReadFile(victim);
  ASSERT_FALSE(bytes.has_value());
  EXPECT_EQ(bytes.error().code(), StatusCode::kCorruption);
  EXPECT_NE(bytes.error().ToString().find(info.path), std::string::npos)
      << bytes.error().ToString();
}

TEST_F(ClientServerTest, PipelinedRequestsAreAnsweredInOrder) {
  Socket s = test::RawConnection(server_->port());
  std::string batch;
  for (uint32_t id = 100; id < 100 + kMaxInFlightPerConnection; ++id) {
    PayloadWriter w;
    w.String("ds").String(id % 2 ? "versions/0000000000000001.version" : "missing");
    batch += EncodeFrame(MessageType::kStat, id, w.data());
  }
  ASSERT_TRUE(s.SendAll(batch, After(std::chrono::seconds(2))).ok());
  for (uint32_t id = 100; id < 100 + kMaxInFlightPerConnection; ++id) {
    auto answer = ReadFrame(s, kMaxAnswerFrame, After(std::chrono::seconds(2)));
    ASSERT_TRUE(answer.has_value());
    EXPECT_EQ(answer->request_id, id);
    EXPECT_EQ(answer->message_type(), id % 2 ? MessageType::kStatOk : MessageType::kError);
  }
}

TEST_F(ClientServerTest, GracefulShutdownClosesIdleConnectionsAndRefusesNewOnes) {
  auto storage = Open();
  ASSERT_TRUE(storage->Exists("versions/0000000000000001.version")
                  .has_value());  // leaves a pooled connection open
  Socket idle = test::RawConnection(server_->port());
  server_->Shutdown();
  EXPECT_TRUE(test::ClosedByPeer(idle, std::chrono::milliseconds(2000)));
  auto after = storage->OpenRead("versions/0000000000000001.version");
  ASSERT_FALSE(after.has_value());
  EXPECT_EQ(after.error().code(), StatusCode::kUnavailable) << after.error().ToString();
  EXPECT_NE(after.error().message().find("127.0.0.1:" + std::to_string(server_->port())),
            std::string::npos);
  EXPECT_EQ(server_->metrics().connections_open.load(), 0);
}

}  // namespace
}  // namespace stoker::net
