// Internals shared by server.cc (lifecycle, accepting), connection.cc (serving one connection)
// and metrics_http.cc. Not a public header.
#pragma once

#include <atomic>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "net/socket.h"
#include "server/memory_budget.h"
#include "server/metrics.h"
#include "server/server.h"
#include "stoker/storage.h"

namespace stoker::server {

struct Connection {
  net::Socket socket;  // closed only when the Connection is reaped, so Abort never hits a reused fd
  std::thread thread;
  std::atomic<bool> done{false};
};

struct Server::State {
  explicit State(ServerOptions o)
      : options(std::move(o)),
        budget(options.memory_limit, &metrics.memory_waits, &metrics.memory_peak) {}

  const ServerOptions options;
  struct Exported {
    std::shared_ptr<Storage> storage;
    std::string dir;  // the dataset directory; empty for an exported Storage (options.storages)
  };
  // The dataset exported as `name`: the options' datasets, or one under options.root (found,
  // and then kept, when first asked for). NotFound otherwise.
  Result<Exported> FindDataset(std::string_view name);
  std::mutex datasets_mu;
  std::map<std::string, Exported> datasets;  // guarded by datasets_mu once serving
  MemoryBudget budget;
  ServerMetrics metrics;

  net::Socket listener;
  net::Socket metrics_listener;
  uint16_t port = 0;
  int metrics_port = -1;
  // Closing the write end makes the read end readable forever: every poll() that includes it
  // wakes up, which is how shutdown reaches threads waiting for the next frame.
  int shutdown_pipe[2] = {-1, -1};
  std::atomic<bool> stopping{false};

  std::thread acceptor;
  std::thread metrics_thread;
  std::mutex mu;
  std::list<std::unique_ptr<Connection>> connections;  // guarded by mu

  void AcceptLoop();
  void MetricsLoop();
  // Joins and frees connections whose thread has finished; returns how many remain.
  size_t ReapLocked();
  void Serve(Connection& c);
};

}  // namespace stoker::server
