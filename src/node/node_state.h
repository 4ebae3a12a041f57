// Internals of the node daemon shared by node.cc (fetching, peers, lifecycle) and
// trainer_service.cc (the unix socket). Not a public header.
#pragma once

#include <atomic>
#include <condition_variable>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "format/chunk.h"
#include "net/client.h"
#include "net/socket.h"
#include "node/chunk_cache.h"
#include "node/chunk_fill.h"
#include "node/disk_tier.h"
#include "node/membership.h"
#include "node/node.h"
#include "node/prefetcher.h"
#include "server/server.h"
#include "stoker/dataset.h"

namespace stoker::node {

struct TrainerConnection {
  net::Socket socket;  // closed when the connection is reaped
  std::thread thread;
  std::atomic<bool> done{false};
};

// Peers export the cache twice: as JOB (a miss is filled from the store) and as JOB + this
// suffix (a miss is NotFound), which an owner asks before going to the store itself.
inline constexpr std::string_view kCachedOnlySuffix = "+cached";

struct Node::State {
  explicit State(NodeOptions o) : options(std::move(o)) {}
  ~State();

  NodeOptions options;
  std::shared_ptr<Storage> store;
  std::unique_ptr<Dataset> dataset;  // the store's version when the daemon started
  std::string manifest;  // its version record (the identity trainers and peers must match)
  std::unordered_map<uint64_t, uint32_t> chunk_index;  // chunk id -> chunk index in the version
  // The version's chunk records, by index: a daemon caches the whole dataset, so it reads them
  // all once at start.
  std::vector<format::ChunkInfo> chunks;
  std::unique_ptr<Membership> membership;
  std::unique_ptr<ChunkCache> cache;
  std::unique_ptr<DiskTier> disk;                         // null without --disk-dir
  std::vector<std::shared_ptr<net::Client>> peer_data;    // per peer; null for this daemon
  std::vector<std::shared_ptr<net::Client>> peer_cached;  // the same, asking only for cached chunks
  std::vector<std::shared_ptr<net::Client>> peer_probe;   // short timeouts, for heartbeats
  std::unique_ptr<server::Server> server;
  // Set once everything above exists: the peer server starts (and may be asked) before the
  // membership and cache, since its bound port can be this daemon's identity.
  std::atomic<bool> ready{false};

  // Trainer service (trainer_service.cc).
  int listen_fd = -1;
  int stop_pipe[2] = {-1, -1};  // closing [1] wakes every wait on [0]
  std::thread acceptor;
  std::mutex trainers_mu;
  std::list<std::unique_ptr<TrainerConnection>> trainers;  // guarded by trainers_mu

  std::unique_ptr<Prefetcher> prefetcher;  // null without prefetching

  struct Counters {
    std::atomic<uint64_t> trainer_gets{0}, trainer_connections{0}, peer_requests{0};
    std::atomic<uint64_t> store_fills{0}, store_bytes{0}, peer_fills{0}, peer_bytes{0};
    std::atomic<uint64_t> peer_failures{0}, peer_corrupt{0}, prefetches{0};
  } counters;

  NodeStats Stats() const;
  void Log(const std::string& line) const;
  uint64_t ChunkSize(uint32_t index) const;
  std::string ChunkName(uint32_t index) const;
  // The structural and CRC32C check of a whole chunk from `source`.
  Status Check(uint32_t index, std::span<const std::byte> bytes, const std::string& source) const;
  // The disk tier if it has the chunk (checked), else the peers (`from_peers`) or the store,
  // handed on as it is verified (ChunkFill); what came from the network is then kept on disk.
  Status Fill(uint32_t index, CachedChunk& out, bool from_peers);
  Status FillFromStore(uint32_t index, ChunkFill& fill);
  // The chunk's live owners in HRW order, this daemon meaning the store; the store last. Each
  // source goes on where the one before it stopped.
  Status FillFromOwners(uint32_t index, ChunkFill& fill);
  // What is missing of a chunk from one peer, checked; a peer that fails is marked down.
  // `cached_only`: the peer answers NotFound unless it holds the chunk already (a plain miss,
  // not a failure).
  Status FillFromPeer(size_t peer, uint32_t index, ChunkFill& fill, bool cached_only);
  Status ProbePeer(size_t peer);
  Result<std::shared_ptr<const CachedChunk>> ForTrainer(uint32_t index);
  Result<std::shared_ptr<const CachedChunk>> ForPeer(uint32_t index);

  Status StartTrainerService();
  void AcceptTrainers();
  void ServeTrainer(TrainerConnection& c);
  void StopTrainerService();
};

}  // namespace stoker::node
