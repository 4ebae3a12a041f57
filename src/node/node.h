// `stoker node`: one job's cache daemon on one machine (docs/cache.md).
//
// The daemons of a job pool their memory into one chunk cache. Each chunk has an owner (HRW
// placement over the live peers, membership.h); the owner fetches it from the store once and
// keeps it; other daemons fetch it from the owner, whole, when a local trainer asks. Trainers
// on this machine connect over a unix socket (node_client/trainer_protocol.h) and get chunks as
// sealed memfds. Every chunk is checked against the metadata (header, index, data CRC32C) before it
// is cached or handed on, wherever it came from: a cache never launders corruption.
//
// Failure: a peer read that fails marks the peer down and moves on to the chunk's next live
// peer, and the store is the last resort, so a dead daemon costs re-reads, never a failed read.
//
// Thread-safety: Start/Shutdown/Abort from any thread; accessors are safe at any time.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "net/uri.h"
#include "node/membership.h"
#include "stoker/status.h"

namespace stoker::node {

struct NodeOptions {
  std::string job;        // namespaces everything: the name peers export and ask for
  std::string store_uri;  // where the dataset lives: what OpenStorage opens (path, file://,
                          // stoker://, s3://)
  net::ServerAddress listen{"127.0.0.1", 7171};  // peer-facing TCP (port 0: ephemeral)
  // This daemon's identity in `peers` (host:port); empty host: `listen` as bound.
  net::ServerAddress advertise{"", 0};
  std::vector<net::ServerAddress> peers;      // every daemon of the job; empty: just this one
  std::string socket_path;                    // trainers' unix socket
  uint64_t memory_limit = uint64_t{4} << 30;  // hard cap on cached chunk bytes
  // Optional local-disk tier (disk_tier.h): chunks kept under DISK_DIR/JOB, at most disk_limit
  // bytes. Empty: none.
  std::string disk_dir;
  uint64_t disk_limit = 0;
  std::string secret;  // the deployment secret (peers and store)
  int metrics_port = -1;
  size_t prefetch_depth = 8;    // chunks ahead of each trainer's cursor; 0: no prefetch
  size_t prefetch_streams = 4;  // chunks prefetched at once
  MembershipOptions membership;
  // One whole-chunk read from a peer, and one heartbeat probe.
  std::chrono::milliseconds peer_timeout{15000};
  std::chrono::milliseconds probe_timeout{500};
  // Where the daemon reports peers going down and up, and fills that fail (one line each).
  std::function<void(const std::string&)> log;
  Status Validate() const;
};

struct NodeStats {
  uint64_t trainer_gets = 0;         // chunks handed to local trainers
  uint64_t trainer_connections = 0;  // currently connected
  uint64_t peer_requests = 0;        // chunk reads served to other daemons (first READ of each)
  uint64_t store_fills = 0, store_bytes = 0;  // chunks read from the store
  uint64_t peer_fills = 0, peer_bytes = 0;    // chunks read from their owner
  uint64_t peer_failures = 0;  // peer reads that failed (the next peer or the store took over)
  uint64_t peer_corrupt = 0;   // chunks from a peer that failed their check
  uint64_t prefetches = 0;
  uint64_t cache_hits = 0, cache_evictions = 0;
  uint64_t cache_bytes = 0, cache_peak_bytes = 0, cache_capacity = 0;
  uint64_t disk_hits = 0, disk_bytes = 0, disk_limit = 0;
  uint32_t peers_live = 0, peers_total = 0;
};

// The counters as Prometheus text (appended to the peer server's /metrics).
std::string RenderNodeMetrics(const NodeStats& stats);

class Node {
 public:
  // Opens the dataset at the store, binds the peer port and the trainer socket, and starts.
  static Result<std::unique_ptr<Node>> Start(NodeOptions options);
  ~Node();  // Shutdown()

  uint16_t port() const;  // the bound peer-facing port
  int metrics_port() const;
  const std::string& socket_path() const;
  NodeStats stats() const;

  void Shutdown();
  // For tests: like kill -9 for the peers (connections cut, nothing more answered).
  void Abort();

  struct State;

 private:
  explicit Node(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace stoker::node
