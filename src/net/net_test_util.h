// Helpers for the network tests: a packed random dataset on disk, an in-process server on an
// ephemeral port, clients with test timeouts, and a raw authenticated socket for hostile-peer
// tests. Not thread-safe: each test builds its own.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>

#include "dataset/packer.h"
#include "net/auth.h"
#include "net/remote_storage.h"
#include "server/server.h"
#include "stoker/dataset.h"
#include "storage/posix_storage.h"
#include "testing/test_util.h"

namespace stoker::net::test {

inline const std::string kSecret = "correct horse battery staple";

struct PackedDir {
  stoker::test::TempDir dir;
  stoker::test::Tree tree;
};

// Packs a random tree (several small chunks) into a fresh directory.
inline std::unique_ptr<PackedDir> PackRandomDir(uint64_t seed, int files = 120) {
  auto p = std::make_unique<PackedDir>();
  stoker::test::RandomTreeOptions o;
  o.files = files;
  p->tree = stoker::test::RandomTree(seed, o);
  dataset::PackOptions po;
  po.chunk_bytes = 64 << 10;
  auto source = stoker::test::TreeSource(p->tree);
  auto storage = storage::NewPosixStorage(p->dir.path());
  auto packed = dataset::Pack(*source, *storage, po);
  EXPECT_TRUE(packed.has_value()) << packed.error().ToString();
  return p;
}

// Test timeouts: short, so hostile-peer tests finish quickly.
inline server::ServerOptions TestServerOptions(std::map<std::string, std::string> datasets) {
  server::ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.datasets = std::move(datasets);
  o.secret = kSecret;
  o.memory_limit = uint64_t{64} << 20;
  o.handshake_timeout = std::chrono::milliseconds(500);
  o.frame_timeout = std::chrono::milliseconds(500);
  return o;
}

inline std::unique_ptr<server::Server> StartServer(server::ServerOptions o) {
  auto s = server::Server::Start(std::move(o));
  EXPECT_TRUE(s.has_value()) << s.error().ToString();
  return s ? std::move(*s) : nullptr;
}

inline std::string UriFor(std::initializer_list<const server::Server*> servers,
                          std::string_view name) {
  std::string uri = "stoker://";
  bool first = true;
  for (const auto* s : servers) {
    if (!first) uri += ",";
    first = false;
    uri += "127.0.0.1:" + std::to_string(s->port());
  }
  return uri + "/" + std::string(name);
}

inline ClientOptions TestClientOptions() {
  ClientOptions o;
  o.connect_timeout = std::chrono::milliseconds(2000);
  o.request_timeout = std::chrono::milliseconds(5000);
  o.retry.base_backoff = std::chrono::milliseconds(1);
  return o;
}

// Every file of `tree` read through `ds` must have exactly its bytes.
inline void ExpectSameFiles(const Dataset& ds, const stoker::test::Tree& tree) {
  ASSERT_EQ(ds.file_count(), tree.files.size());
  for (const auto& [path, contents] : tree.files) {
    auto index = ds.Find(path);
    ASSERT_TRUE(index.has_value()) << path;
    auto bytes = ds.ReadFile(*index);
    ASSERT_TRUE(bytes.has_value()) << path << ": " << bytes.error().ToString();
    EXPECT_EQ(stoker::test::AsString(*bytes), contents) << path;
  }
}

// A raw socket to `port`, authenticated unless `authenticate` is false.
inline Socket RawConnection(uint16_t port, bool authenticate = true) {
  auto s = Connect("127.0.0.1", port, After(std::chrono::milliseconds(2000)));
  EXPECT_TRUE(s.has_value()) << s.error().ToString();
  if (!s) return {};
  if (authenticate) {
    const Status st = ClientHandshake(*s, kSecret, After(std::chrono::milliseconds(2000)));
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  return std::move(*s);
}

// True once the peer has closed the connection (EOF or reset) before `wait` passes.
inline bool ClosedByPeer(Socket& s, std::chrono::milliseconds wait) {
  const Deadline deadline = After(wait);
  std::byte b[4096];
  while (Clock::now() < deadline) {
    const Status st = s.RecvExact(std::span(b, 1), deadline);
    if (st.IsUnavailable()) return true;
    if (st.IsTimeout()) return false;
  }
  return false;
}

// Waits (up to 10 s) for a condition another thread makes true, e.g. a server counter bumped
// just after the client saw the answer. Returns the final value of `condition()`.
template <typename F>
bool Eventually(F condition) {
  const Deadline deadline = After(std::chrono::milliseconds(10000));
  while (!condition() && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return condition();
}

}  // namespace stoker::net::test
