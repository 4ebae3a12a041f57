// The node daemon in-process: several daemons on loopback over one store directory, trainers
// reading through NodeStorage, daemons aborted (as by kill -9), a corrupting peer, a daemon
// of another dataset, and a cache smaller than the dataset.
#include "node/node.h"

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <mutex>
#include <thread>

#include "dataset/version_view.h"
#include "format/chunk.h"
#include "net/net_test_util.h"
#include "net/payload.h"
#include "node_client/node_storage.h"
#include "node_client/trainer_protocol.h"
#include "storage/memory_storage.h"
#include "storage/posix_storage.h"

namespace stoker::node {
namespace {

using net::test::kSecret;
using net::test::PackedDir;
using net::test::PackRandomDir;

uint16_t FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

class NodeTest : public ::testing::Test {
 protected:
  void SetUp() override { packed_ = PackRandomDir(42, 150); }

  // `n` daemons of one job on loopback, all knowing each other.
  void StartDaemons(int n, uint64_t memory_limit = uint64_t{256} << 20) {
    for (int i = 0; i < n; ++i) addresses_.push_back({"127.0.0.1", FreePort()});
    for (int i = 0; i < n; ++i) daemons_.push_back(StartDaemon(i, memory_limit));
  }

  std::unique_ptr<Node> StartDaemon(int i, uint64_t memory_limit = uint64_t{256} << 20,
                                    const std::string& disk_dir = "") {
    NodeOptions o;
    o.disk_dir = disk_dir;
    o.disk_limit = uint64_t{1} << 30;
    o.job = "job1";
    o.store_uri = packed_->dir.path();
    o.listen = addresses_[i];
    o.peers = addresses_;
    o.socket_path = Socket(i);
    o.memory_limit = memory_limit;
    o.secret = kSecret;
    o.membership.heartbeat_interval = std::chrono::milliseconds(50);
    o.membership.misses_to_down = misses_to_down_;
    o.probe_timeout = std::chrono::milliseconds(300);
    o.peer_timeout = std::chrono::milliseconds(3000);
    o.log = [this](const std::string& line) {
      std::lock_guard lock(log_mu_);
      log_.push_back(line);
    };
    auto node = Node::Start(std::move(o));
    EXPECT_TRUE(node.has_value()) << node.error().ToString();
    return node ? std::move(*node) : nullptr;
  }

  std::string Socket(int i) const { return sockets_.Join("node" + std::to_string(i) + ".sock"); }

  // Every file of the tree, read by a trainer on daemon `i`, must be exactly right.
  std::shared_ptr<Storage> ReadAllThrough(int i) {
    auto storage = NewNodeStorage(storage::NewPosixStorage(packed_->dir.path()), Socket(i));
    ExpectEveryFileRight(storage);
    return storage;
  }

  void ExpectEveryFileRight(const std::shared_ptr<Storage>& storage) {
    auto ds = Dataset::Open(storage);
    ASSERT_TRUE(ds.has_value()) << ds.error().ToString();
    for (const auto& [path, contents] : packed_->tree.files) {
      auto index = (*ds)->Find(path);
      ASSERT_TRUE(index.has_value()) << path;
      auto bytes = (*ds)->ReadFile(*index);
      ASSERT_TRUE(bytes.has_value()) << bytes.error().ToString();
      ASSERT_EQ(stoker::test::AsString(*bytes), contents) << path;
    }
  }

  uint32_t ChunkCount() {
    auto ds = Dataset::Open(packed_->dir.path());
    return dataset::ViewOf(**ds).chunk_count();
  }

  uint64_t StoreFills() {
    uint64_t n = 0;
    for (auto& d : daemons_) n += d ? d->stats().store_fills : 0;
    return n;
  }

  std::unique_ptr<PackedDir> packed_;
  std::mutex log_mu_;
  std::vector<std::string> log_;  // the daemons' log lines
  int misses_to_down_ = MembershipOptions{}.misses_to_down;
  stoker::test::TempDir sockets_;
  std::vector<net::ServerAddress> addresses_;
  std::vector<std::unique_ptr<Node>> daemons_;
};

TEST_F(NodeTest, EachChunkComesFromTheStoreOnceForTheWholeJob) {
  StartDaemons(3);
  ASSERT_GT(ChunkCount(), 6u);
  for (int i = 0; i < 3; ++i) {
    auto storage = ReadAllThrough(i);
    const auto s = *GetNodeStorageStats(*storage);
    EXPECT_GT(s.node_reads, 0u);
    EXPECT_EQ(s.store_reads, 0u);
  }
  // Three trainers on three machines read the whole dataset; the store saw each chunk once.
  EXPECT_EQ(StoreFills(), ChunkCount());
  uint64_t peer_fills = 0;
  for (auto& d : daemons_) {
    const NodeStats s = d->stats();
    EXPECT_GT(s.trainer_gets, 0u);
    EXPECT_GT(s.peer_requests, 0u);  // every daemon owns something others asked for
    EXPECT_EQ(s.peer_failures, 0u);
    EXPECT_EQ(s.peers_live, 3u);
    peer_fills += s.peer_fills;
  }
  EXPECT_GT(peer_fills, 0u);
}

TEST_F(NodeTest, AKilledDaemonCostsRereadsNotFailures) {
  // Heartbeats alone never mark a peer down here, so the first read that finds daemon 2 dead
  // must (this is the path under test; with 50 ms heartbeats they won the race on a busy
  // machine). They still mark it up again when it comes back.
  misses_to_down_ = 1'000'000;
  StartDaemons(3);
  ReadAllThrough(0);
  daemons_[2]->Abort();  // as kill -9: its connections are cut, its cache is gone
  daemons_[2].reset();
  // A trainer on daemon 1 reads everything: daemon 2's chunks go to their next owner.
  ReadAllThrough(1);
  EXPECT_GT(daemons_[1]->stats().peer_failures + daemons_[0]->stats().peer_failures, 0u);
  EXPECT_LT(daemons_[1]->stats().peers_live, 3u);
  // A trainer whose own daemon is gone reads the store directly, every byte right.
  auto orphan = ReadAllThrough(2);
  EXPECT_GT(GetNodeStorageStats(*orphan)->store_reads, 0u);
  // The daemon comes back (same address and socket): it rejoins and serves its trainer again.
  const uint64_t others_before =
      daemons_[0]->stats().store_fills + daemons_[1]->stats().store_fills;
  daemons_[2] = StartDaemon(2);
  ASSERT_NE(daemons_[2], nullptr);
  for (int i = 0; i < 200 && daemons_[0]->stats().peers_live < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(daemons_[0]->stats().peers_live, 3u);
  // The trainer tries its daemon again after its retry pause (1 s); a try that finds the daemon
  // not yet ready (a loaded machine) starts another pause, so wait a few.
  for (int pause = 0; pause < 8 && GetNodeStorageStats(*orphan)->node_reads == 0; ++pause) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    ExpectEveryFileRight(orphan);
  }
  EXPECT_GT(GetNodeStorageStats(*orphan)->node_reads, 0u);
  // The restarted daemon took its own chunks back from the peers that stood in for it (or held
  // copies): the store saw nothing more.
  EXPECT_EQ(daemons_[2]->stats().store_fills, 0u);
  EXPECT_EQ(daemons_[0]->stats().store_fills + daemons_[1]->stats().store_fills, others_before);
  EXPECT_GT(daemons_[2]->stats().peer_fills, 0u);
}

TEST_F(NodeTest, ATrainerWithoutADaemonReadsTheStore) {
  auto storage = ReadAllThrough(0);  // nothing listens on the socket
  const auto s = *GetNodeStorageStats(*storage);
  EXPECT_EQ(s.node_reads, 0u);
  EXPECT_GT(s.store_reads, 0u);
}

TEST_F(NodeTest, ADaemonOfAnotherDatasetIsRefused) {
  auto other = PackRandomDir(7, 40);
  addresses_.push_back({"127.0.0.1", FreePort()});
  NodeOptions o;
  o.job = "job1";
  o.store_uri = other->dir.path();
  o.listen = addresses_[0];
  o.socket_path = Socket(0);
  o.secret = kSecret;
  auto node = Node::Start(std::move(o));
  ASSERT_TRUE(node.has_value()) << node.error().ToString();
  auto storage = ReadAllThrough(0);  // right bytes: the daemon said no, the store answered
  EXPECT_EQ(GetNodeStorageStats(*storage)->node_reads, 0u);
  EXPECT_EQ((*node)->stats().trainer_gets, 0u);
}

TEST_F(NodeTest, CorruptBytesFromAPeerAreNeverHandedOn) {
  // A "peer" that exports a copy of the dataset whose chunk bytes are damaged: it answers
  // heartbeats correctly (the same version record, exported as MANIFEST as daemons do), so only
  // the chunk check can catch it.
  auto bad = std::make_shared<storage::MemoryStorage>();
  auto good = storage::NewPosixStorage(packed_->dir.path());
  for (const char* dir : {"chunks", "segments", "versions"}) ASSERT_TRUE(bad->CreateDirs(dir).ok());
  bad->SetContents("MANIFEST", stoker::test::ReadFileToString(
                                   packed_->dir.Join("versions/0000000000000001.version")));
  for (const std::string& dir :
       {std::string("chunks"), std::string("segments"), std::string("versions")}) {
    auto names = good->List(dir);
    ASSERT_TRUE(names.has_value());
    for (const std::string& name : *names) {
      const std::string path = dir.empty() ? name : dir + "/" + name;
      auto bytes = good->Map(path);
      if (!bytes) continue;  // a directory
      std::string copy(reinterpret_cast<const char*>((*bytes)->bytes().data()),
                       (*bytes)->bytes().size());
      if (dir == "chunks") copy[copy.size() / 2] ^= 0x40;
      auto f = bad->Create(path);
      ASSERT_TRUE(f.has_value());
      ASSERT_TRUE((*f)->Append(std::as_bytes(std::span(copy))).ok());
      ASSERT_TRUE((*f)->Close().ok());
    }
  }
  auto so = net::test::TestServerOptions({});
  so.storages.emplace("job1", bad);
  auto liar = net::test::StartServer(std::move(so));
  ASSERT_NE(liar, nullptr);
  addresses_.push_back({"127.0.0.1", FreePort()});
  addresses_.push_back({"127.0.0.1", liar->port()});
  daemons_.push_back(StartDaemon(0));
  ReadAllThrough(0);
  EXPECT_GT(daemons_[0]->stats().peer_corrupt, 0u);
  EXPECT_EQ(daemons_[0]->stats().peer_fills, 0u);
}

TEST_F(NodeTest, ADamagedChunkInTheStoreIsSaidByTheDaemonThatReadIt) {
  StartDaemons(1);
  const std::filesystem::path chunks = std::filesystem::path(packed_->dir.path()) / "chunks";
  const std::filesystem::path victim = std::filesystem::directory_iterator(chunks)->path();
  std::string bytes = stoker::test::ReadFileToString(victim.string());
  bytes[bytes.size() / 2] ^= 0x40;
  stoker::test::WriteStringToFile(victim.string(), bytes);
  auto storage = NewNodeStorage(storage::NewPosixStorage(packed_->dir.path()), Socket(0));
  auto ds = Dataset::Open(storage);
  ASSERT_TRUE(ds.has_value()) << ds.error().ToString();
  int corrupt = 0;
  for (uint64_t f = 0; f < (*ds)->file_count(); ++f) {
    auto read = (*ds)->ReadFile(f);
    if (!read) corrupt += read.error().IsCorruption() ? 1 : 0;
  }
  EXPECT_GT(corrupt, 0);
  std::lock_guard lock(log_mu_);
  EXPECT_TRUE(std::ranges::any_of(log_, [&](const std::string& line) {
    return line.starts_with("the store's chunk is damaged: Corruption") &&
           line.find(victim.filename().string()) != std::string::npos;
  })) << (log_.empty() ? "no log line" : log_.back());
}

TEST_F(NodeTest, ACacheSmallerThanTheDatasetStaysUnderItsLimit) {
  uint64_t largest = 0, total = 0;
  {
    auto ds = Dataset::Open(packed_->dir.path());
    for (uint32_t i = 0; i < dataset::ViewOf(**ds).chunk_count(); ++i) {
      largest = std::max(largest, dataset::ViewOf(**ds).chunk(i).value().file_size);
      total += dataset::ViewOf(**ds).chunk(i).value().file_size;
    }
  }
  const uint64_t limit = 3 * largest;
  ASSERT_LT(limit, total);
  StartDaemons(1, limit);
  ReadAllThrough(0);
  ReadAllThrough(0);
  const NodeStats s = daemons_[0]->stats();
  EXPECT_LE(s.cache_peak_bytes, limit);
  EXPECT_GT(s.cache_evictions, 0u);
}

TEST_F(NodeTest, TheDiskTierServesRereadsAndSurvivesARestart) {
  stoker::test::TempDir disk;
  uint64_t largest = 0;
  {
    auto ds = Dataset::Open(packed_->dir.path());
    for (uint32_t i = 0; i < dataset::ViewOf(**ds).chunk_count(); ++i) {
      largest = std::max(largest, dataset::ViewOf(**ds).chunk(i).value().file_size);
    }
  }
  addresses_.push_back({"127.0.0.1", FreePort()});
  daemons_.push_back(StartDaemon(0, 2 * largest, disk.path()));  // memory holds 2 chunks
  ReadAllThrough(0);
  ReadAllThrough(0);
  EXPECT_EQ(StoreFills(), ChunkCount());  // the second pass came from memory and disk
  EXPECT_GT(daemons_[0]->stats().disk_hits, 0u);
  // A restarted daemon (same disk) reads nothing from the store; a damaged file is a miss.
  daemons_[0].reset();
  const std::string some_chunk =
      disk.path() + "/job1/" +
      format::ChunkPath(dataset::ViewOf(**Dataset::Open(packed_->dir.path())).chunk(0).value().id);
  std::string bytes = stoker::test::ReadFileToString(some_chunk);
  bytes[bytes.size() / 2] ^= 1;
  stoker::test::WriteStringToFile(some_chunk, bytes);
  daemons_[0] = StartDaemon(0, 2 * largest, disk.path());
  ReadAllThrough(0);
  EXPECT_EQ(daemons_[0]->stats().store_fills, 1u);  // only the damaged chunk
  EXPECT_GE(daemons_[0]->stats().disk_hits, ChunkCount() - 1);
}

// Local processes that misuse the trainer socket get an error or lose their connection; the
// daemon goes on serving everyone else.
TEST_F(NodeTest, MalformedTrainerMessagesAreRefused) {
  StartDaemons(1);
  auto expect_refused = [&](const std::string& message) {
    auto socket = ConnectUnix(Socket(0));
    ASSERT_TRUE(socket.has_value());
    ASSERT_TRUE(SendMessage(*socket, message, -1, net::After(std::chrono::seconds(2))).ok());
    int fd = -1;
    auto reply = ReceiveMessage(*socket, &fd, net::After(std::chrono::seconds(5)));
    EXPECT_EQ(fd, -1);
    if (reply) {
      net::PayloadReader r(*reply);
      auto code = r.U8();
      ASSERT_TRUE(code.has_value());
      EXPECT_NE(*code, 0) << "accepted: " << testing::PrintToString(message);
    }
  };
  expect_refused("");                                      // empty
  expect_refused(std::string("\x07", 1));                  // unknown type
  expect_refused(std::string("\x02\x01\x02", 3));          // GET before HELLO, and truncated
  expect_refused(std::string("\x01\xff\xff\xff\x7f", 5));  // HELLO claiming 2 GiB
  {
    net::PayloadWriter w;
    w.U8(1).Bytes("stoker-version 2\nnot ours\n");  // another dataset's version
    expect_refused(w.data());
  }
  // A greeted trainer asking for a chunk that does not exist.
  auto socket = ConnectUnix(Socket(0));
  ASSERT_TRUE(socket.has_value());
  net::PayloadWriter hello;
  hello.U8(1).Bytes(
      stoker::test::ReadFileToString(packed_->dir.Join("versions/0000000000000001.version")));
  ASSERT_TRUE(SendMessage(*socket, hello.data(), -1, net::After(std::chrono::seconds(2))).ok());
  int fd = -1;
  auto greeting = ReceiveMessage(*socket, &fd, net::After(std::chrono::seconds(5)));
  ASSERT_TRUE(greeting.has_value());
  EXPECT_EQ((*greeting)[0], '\0');
  net::PayloadWriter get;
  get.U8(2).U64(0xdeadbeefdeadbeefull);
  ASSERT_TRUE(SendMessage(*socket, get.data(), -1, net::After(std::chrono::seconds(2))).ok());
  auto missing = ReceiveMessage(*socket, &fd, net::After(std::chrono::seconds(5)));
  ASSERT_TRUE(missing.has_value());
  EXPECT_EQ(static_cast<StatusCode>((*missing)[0]), StatusCode::kNotFound);
  EXPECT_EQ(fd, -1);
  // A plan of more entries than the dataset has files (each entry reads at least one): PLAN
  // pieces kept arriving and the daemon kept growing the plan, and rebuilding it, for each.
  uint64_t files = 0;
  for (uint32_t c = 0; c < ChunkCount(); ++c) {
    files += dataset::ViewOf(**Dataset::Open(packed_->dir.path())).chunk(c).value().entry_count;
  }
  std::optional<StatusCode> plan_answer;
  for (uint64_t sent = 0; sent <= files + ChunkCount() && !plan_answer; sent += 1000) {
    net::PayloadWriter plan;
    plan.U8(3).U8(sent == 0 ? 1 : 0).U32(1000);
    for (int i = 0; i < 1000; ++i) plan.U64(0xdeadbeefdeadbeefull).U32(0);
    ASSERT_TRUE(SendMessage(*socket, plan.data(), -1, net::After(std::chrono::seconds(2))).ok());
    auto answer = ReceiveMessage(*socket, &fd, net::After(std::chrono::seconds(5)));
    ASSERT_TRUE(answer.has_value());
    if ((*answer)[0] != 0) plan_answer = static_cast<StatusCode>((*answer)[0]);
  }
  EXPECT_EQ(plan_answer, StatusCode::kInvalidArgument);
  ReadAllThrough(0);  // still serving
  EXPECT_GT(daemons_[0]->stats().trainer_gets, 0u);
}

TEST_F(NodeTest, BadOptionsAreRefused) {
  NodeOptions o;
  o.job = "job1";
  o.store_uri = packed_->dir.path();
  o.listen = {"127.0.0.1", 0};
  o.socket_path = Socket(0);
  o.secret = "short";
  EXPECT_EQ(Node::Start(o).error().code(), StatusCode::kInvalidArgument);
  o.secret = kSecret;
  o.memory_limit = 10;  // smaller than a chunk
  EXPECT_EQ(Node::Start(o).error().code(), StatusCode::kInvalidArgument);
  o.memory_limit = uint64_t{64} << 20;
  o.peers = {{"127.0.0.1", 1}};  // this daemon is not in its own peer list
  EXPECT_EQ(Node::Start(o).error().code(), StatusCode::kInvalidArgument);
  o.peers.clear();
  o.prefetch_streams = 0;
  EXPECT_EQ(Node::Start(o).error().code(), StatusCode::kInvalidArgument);
  o.prefetch_streams = 4;
  o.store_uri = sockets_.Join("missing");
  EXPECT_FALSE(Node::Start(o).has_value());
  // Two daemons cannot share one trainer socket.
  o.store_uri = packed_->dir.path();
  auto first = Node::Start(o);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(Node::Start(o).error().code(), StatusCode::kAlreadyExists);
}

}  // namespace
}  // namespace stoker::node
