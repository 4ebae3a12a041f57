// Writes over stoker:// to a server started with --writable (docs/protocol.md, "Writes"):
// packs and appends land whole, concurrent writers publish through the server's exclusive
// create, a file appears only once finished, and nothing escapes the dataset directory.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <thread>

#include "dataset/packer.h"
#include "dataset/upgrade.h"
#include "dataset/verify.h"
#include "net/net_test_util.h"
#include "storage/posix_storage.h"
#include "testing/test_util.h"

namespace stoker::net {
namespace {

using stoker::test::AsString;

std::span<const std::byte> Bytes(std::string_view s) { return std::as_bytes(std::span(s)); }

class RemoteWritesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto o = test::TestServerOptions({{"ds", dir_.Join("ds")}});  // does not exist yet
    o.writable = true;
    server_ = test::StartServer(std::move(o));
    ASSERT_NE(server_, nullptr);
    uri_ = test::UriFor({server_.get()}, "ds");
  }
  std::shared_ptr<Storage> Open() {
    auto s = OpenRemoteStorage(uri_, test::kSecret, test::TestClientOptions());
    EXPECT_TRUE(s.has_value()) << s.error().ToString();
    return s ? *s : nullptr;
  }
  std::string Local(std::string_view path) { return dir_.Join("ds/" + std::string(path)); }

  stoker::test::TempDir dir_;
  std::unique_ptr<server::Server> server_;
  std::string uri_;
};

TEST_F(RemoteWritesTest, PackAndConcurrentAppendsLandWhole) {
  dataset::PackOptions o;
  o.chunk_bytes = 64 << 10;
  stoker::test::RandomTreeOptions t;
  t.files = 60;
  const auto base = stoker::test::RandomTree(1, t);
  ASSERT_TRUE(dataset::Pack(*stoker::test::TreeSource(base), *Open(), o).has_value());

  // Four writers append at once, each over its own connection pool.
  o.append = true;
  std::vector<stoker::test::Tree> trees;
  for (int w = 0; w < 4; ++w) {
    stoker::test::Tree tree;
    for (int i = 0; i < 20; ++i) {
      tree.files["w" + std::to_string(w) + "/" + std::to_string(i)] =
          stoker::test::RandomBytes(100 * w + i, 5000 + i);
    }
    trees.push_back(std::move(tree));
  }
  std::atomic<int> landed = 0;
  std::vector<std::thread> writers;
  writers.reserve(4);
  for (int w = 0; w < 4; ++w) {
    writers.emplace_back([&, w] {
      auto packed = dataset::Pack(*stoker::test::TreeSource(trees[w]), *Open(), o);
      EXPECT_TRUE(packed.has_value()) << packed.error().ToString();
      if (packed) ++landed;
    });
  }
  for (auto& t2 : writers) t2.join();
  EXPECT_EQ(landed.load(), 4);

  // Read back over the wire and from the server's directory: every file of every writer.
  for (const auto& storage :
       {Open(), std::shared_ptr<Storage>(storage::NewPosixStorage(dir_.Join("ds")))}) {
    auto ds = Dataset::Open(storage).value();
    EXPECT_EQ(ds->version(), 5u);
    std::vector<const stoker::test::Tree*> all = {&base};
    for (const auto& tree : trees) all.push_back(&tree);
    for (const auto* tree : all) {
      for (const auto& [path, bytes] : tree->files) {
        auto index = ds->Find(path);
        ASSERT_TRUE(index.has_value()) << path;
        EXPECT_EQ(AsString(ds->ReadFile(*index).value()), bytes) << path;
      }
    }
    EXPECT_TRUE(dataset::Verify(*storage).value().ok());
  }
}

TEST_F(RemoteWritesTest, ExclusiveCreateHasExactlyOneWinner) {
  std::atomic<int> won = 0, lost = 0;
  std::vector<std::thread> threads;
  threads.reserve(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      const std::string bytes = "writer " + std::to_string(i);
      const Status st = Open()->CreateExclusive("versions/0000000000000001.version", Bytes(bytes));
      if (st.ok())
        ++won;
      else if (st.IsAlreadyExists())
        ++lost;
      else
        ADD_FAILURE() << st.ToString();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(won.load(), 1);
  EXPECT_EQ(lost.load(), 7);
  const std::string held =
      stoker::test::ReadFileToString(Local("versions/0000000000000001.version"));
  EXPECT_TRUE(held.starts_with("writer ")) << held;
  // No upload is left behind by the losers.
  EXPECT_EQ(Open()->List("versions").value().size(), 1u);
}

TEST_F(RemoteWritesTest, AFileAppearsOnlyWhenFinished) {
  auto storage = Open();
  std::string big(10 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7 + i / 4093);
  {
    auto file = storage->Create("chunks/big.chunk").value();
    for (size_t at = 0; at < big.size(); at += 1234567) {  // pieces unlike the frame size
      ASSERT_TRUE(file->Append(Bytes(std::string_view(big).substr(at, 1234567))).ok());
    }
    EXPECT_FALSE(*storage->Exists("chunks/big.chunk"));  // only the upload so far
    ASSERT_TRUE(file->Close().ok());
  }
  EXPECT_EQ(stoker::test::ReadFileToString(Local("chunks/big.chunk")), big);
  {
    auto dropped = storage->Create("chunks/dropped.chunk").value();
    ASSERT_TRUE(dropped->Append(Bytes(std::string(5 << 20, 'x'))).ok());
  }  // never closed: aborted
  EXPECT_EQ(storage->List("chunks").value(), std::vector<std::string>{"big.chunk"});
  {
    auto empty = storage->Create("segments/empty.seg").value();
    ASSERT_TRUE(empty->Close().ok());
  }
  EXPECT_EQ(std::filesystem::file_size(Local("segments/empty.seg")), 0u);
  ASSERT_TRUE(storage->Rename("segments/empty.seg", "segments/moved.seg").ok());
  ASSERT_TRUE(storage->Remove("segments/moved.seg").ok());
  EXPECT_EQ(storage->Remove("segments/moved.seg").code(), StatusCode::kNotFound);
}

// A loopback TCP proxy in front of a server that, once armed, lets the next request through but
// loses its answer: it closes the client's connection as soon as the server answers.
class AnswerLosingProxy {
 public:
  explicit AnswerLosingProxy(uint16_t server_port) : server_port_(server_port) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(listener_, 16), 0);
    socklen_t len = sizeof a;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { Accept(); });
  }
  ~AnswerLosingProxy() {
    ::shutdown(listener_, SHUT_RDWR);
    ::close(listener_);
    acceptor_.join();
    std::lock_guard lock(mu_);
    for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    for (std::thread& t : pumps_) t.join();
    for (int fd : fds_) ::close(fd);
  }
  uint16_t port() const { return port_; }
  void Arm() { armed_ = true; }
  int answers_lost() const { return lost_; }

 private:
  void Accept() {
    for (;;) {
      const int client = ::accept(listener_, nullptr, nullptr);
      if (client < 0) return;
      const int server = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(server_port_);
      EXPECT_EQ(::connect(server, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
      std::lock_guard lock(mu_);
      fds_.push_back(client);
      fds_.push_back(server);
      pumps_.emplace_back([=, this] { Pump(client, server, false); });
      pumps_.emplace_back([=, this] { Pump(server, client, true); });
    }
  }
  void Pump(int from, int to, bool answers) {
    char buf[65536];
    for (;;) {
      const ssize_t n = ::read(from, buf, sizeof buf);
      if (n <= 0) break;
      if (answers && armed_.exchange(false)) {  // lose this answer, and the connection
        ++lost_;
        break;
      }
      if (::write(to, buf, static_cast<size_t>(n)) != n) break;
    }
    ::shutdown(to, SHUT_RDWR);
    ::shutdown(from, SHUT_RDWR);
  }

  uint16_t server_port_, port_ = 0;
  int listener_ = -1;
  std::atomic<bool> armed_ = false;
  std::atomic<int> lost_ = 0;
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<int> fds_;
  std::vector<std::thread> pumps_;
};

// RENAME and REMOVE are not idempotent: retried after a lost answer, the server says the source
// is gone. The client sees that its own lost try did it and reports success.
TEST_F(RemoteWritesTest, RenameAndRemoveRetriedAfterALostAnswerSucceed) {
  AnswerLosingProxy proxy(server_->port());
  auto storage = OpenRemoteStorage("stoker://127.0.0.1:" + std::to_string(proxy.port()) + "/ds",
                                   test::kSecret, test::TestClientOptions());
  ASSERT_TRUE(storage.has_value()) << storage.error().ToString();
  ASSERT_TRUE((*storage)->CreateExclusive("segments/a.tmp", Bytes("abc")).ok());
  proxy.Arm();
  ASSERT_TRUE((*storage)->Rename("segments/a.tmp", "segments/a.seg").ok());
  EXPECT_EQ(proxy.answers_lost(), 1);
  EXPECT_TRUE(std::filesystem::exists(Local("segments/a.seg")));
  EXPECT_FALSE(std::filesystem::exists(Local("segments/a.tmp")));
  proxy.Arm();
  ASSERT_TRUE((*storage)->Remove("segments/a.seg").ok());
  EXPECT_EQ(proxy.answers_lost(), 2);
  EXPECT_FALSE(std::filesystem::exists(Local("segments/a.seg")));
  // Without a lost answer, a missing source is still an error.
  EXPECT_EQ((*storage)->Rename("segments/a.tmp", "segments/b.seg").code(), StatusCode::kNotFound);
  EXPECT_EQ((*storage)->Remove("segments/a.seg").code(), StatusCode::kNotFound);
}

TEST_F(RemoteWritesTest, NothingIsWrittenOutsideTheDataset) {
  auto storage = Open();
  const auto abc = Bytes("abc");
  EXPECT_EQ(storage->CreateExclusive("MANIFEST", abc).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(storage->CreateExclusive("elsewhere/x", abc).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(storage->CreateExclusive("chunks/../../x", abc).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(storage->Rename("chunks/a", "other/b").code(), StatusCode::kPermissionDenied);
  // A planted symbolic link is never followed.
  std::filesystem::create_directories(dir_.Join("outside"));
  std::filesystem::create_directories(Local(""));
  std::filesystem::create_directory_symlink(dir_.Join("outside"), Local("parts"));
  EXPECT_EQ(storage->CreateExclusive("parts/job/part.seg", abc).code(),
            StatusCode::kPermissionDenied);
  EXPECT_TRUE(std::filesystem::is_empty(dir_.Join("outside")));
}

TEST_F(RemoteWritesTest, UpgradeRunsOverTheWire) {
  stoker::test::Tree tree;
  for (int i = 0; i < 30; ++i) {
    tree.files["c" + std::to_string(i % 3) + "/" + std::to_string(i)] =
        stoker::test::RandomBytes(i, 100 + 10 * i);
  }
  std::filesystem::create_directories(Local(""));
  stoker::test::WriteFormat1(*storage::NewPosixStorage(dir_.Join("ds")), tree,
                             format::LabelMode::kFirstDirectory);
  auto storage = Open();
  EXPECT_EQ(Dataset::Open(storage).error().code(), StatusCode::kUnsupported);
  auto upgraded = dataset::Upgrade(*storage);
  ASSERT_TRUE(upgraded.has_value()) << upgraded.error().ToString();
  EXPECT_EQ(upgraded->version, 3u);
  auto ds = Dataset::Open(storage).value();
  for (const auto& [path, bytes] : tree.files) {
    EXPECT_EQ(AsString(ds->ReadFile(ds->Find(path).value()).value()), bytes) << path;
  }
}

}  // namespace
}  // namespace stoker::net
