#include "node/node.h"

#include <unistd.h>

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "dataset/version_view.h"
#include "format/chunk.h"
#include "format/manifest.h"
#include "format/version_record.h"
#include "net/auth.h"
#include "net/protocol.h"
#include "net/remote_storage.h"
#include "node/node_state.h"
#include "storage/read_only_storage.h"

namespace stoker::node {
namespace {

// How long a peer's read waits for a chunk's fill to make progress (it then fails, and the
// peer goes elsewhere); the peer's own timeout may end the wait sooner.
constexpr std::chrono::milliseconds kFillStall{60000};
// Pieces a fill reads at a time: from a peer (each a round trip, so the bytes go on to this
// daemon's readers after 1 MiB rather than a whole chunk), and from the store (an object
// store's requests cost more).
constexpr uint64_t kPeerPiece = 1 << 19;
constexpr uint64_t kStorePiece = 1 << 20;

// A read-only file over bytes kept alive by `owner` (the manifest), or over a cached chunk,
// whose reads wait for the bytes they need to be verified (the chunk may still be filling).
class HeldBytesFile : public RandomAccessFile {
 public:
  HeldBytesFile(std::span<const std::byte> bytes, std::shared_ptr<const void> owner)
      : bytes_(bytes), owner_(std::move(owner)) {}
  explicit HeldBytesFile(std::shared_ptr<const CachedChunk> chunk)
      : bytes_(chunk->bytes()), owner_(chunk), chunk_(std::move(chunk)) {}
  uint64_t Size() const override { return bytes_.size(); }
  Status ReadAt(uint64_t offset, std::span<std::byte> dst) const override {
    if (offset > bytes_.size() || dst.size() > bytes_.size() - offset) {
      return Status::IOError(fmt::format("read of {} bytes at {} past the end ({} bytes)",
                                         dst.size(), offset, bytes_.size()));
    }
    if (chunk_ != nullptr) STOKER_RETURN_IF_ERROR(chunk_->WaitFor(offset, dst.size(), kFillStall));
    std::copy_n(bytes_.begin() + static_cast<ptrdiff_t>(offset), dst.size(), dst.begin());
    return Status::OK();
  }

 private:
  std::span<const std::byte> bytes_;
  std::shared_ptr<const void> owner_;
  std::shared_ptr<const CachedChunk> chunk_;  // null for plain bytes
};

// What the daemon exports to its peers (as dataset `job`): its version record under the name
// MANIFEST, for heartbeats, and chunk
// files from the cache, filled from the store. A peer's request never goes on to a third daemon,
// so requests cannot loop however the daemons' views of who is alive differ.
class PeerExport final : public storage::ReadOnlyStorage {
 public:
  PeerExport(Node::State* state, bool cached_only) : state_(state), cached_only_(cached_only) {}

  Result<std::unique_ptr<RandomAccessFile>> OpenRead(std::string_view path) override {
    if (path == format::kManifestPath) {
      auto bytes = std::make_shared<std::string>(state_->manifest);
      return std::make_unique<HeldBytesFile>(std::as_bytes(std::span(*bytes)), bytes);
    }
    const auto id = format::ParseChunkPath(path);
    const auto it = id ? state_->chunk_index.find(*id) : state_->chunk_index.end();
    if (it == state_->chunk_index.end()) {
      return Err(Status::NotFound(Describe(path) + ": not a chunk of this job's dataset"));
    }
    if (!state_->ready.load()) {
      return Err(Status::Unavailable(Describe(path) + ": the daemon is starting"));
    }
    if (cached_only_) {
      auto chunk = state_->cache->Peek(it->second);
      if (chunk == nullptr) return Err(Status::NotFound(Describe(path) + ": not cached"));
      state_->counters.peer_requests.fetch_add(1);
      return std::make_unique<HeldBytesFile>(std::move(chunk));
    }
    state_->counters.peer_requests.fetch_add(1);
    STOKER_ASSIGN_OR_RETURN(auto chunk, state_->ForPeer(it->second));
    return std::make_unique<HeldBytesFile>(std::move(chunk));
  }
  Result<std::shared_ptr<const FileBytes>> Map(std::string_view path) override {
    return Err(ReadOnly(path));
  }
  Result<std::vector<std::string>> List(std::string_view path) override {
    return Err(Status::NotFound(Describe(path) + ": a node daemon lists nothing"));
  }
  Result<bool> Exists(std::string_view path) override {
    if (path == format::kManifestPath) return true;
    const std::optional<uint64_t> chunk = format::ParseChunkPath(path);
    return chunk && state_->chunk_index.contains(*chunk);
  }
  std::string Describe(std::string_view path) const override {
    return fmt::format("node cache of job {}: {}", state_->options.job, path);
  }

 private:
  Status ReadOnly(std::string_view path) const override {
    return Status::Unsupported(Describe(path) + ": read-only");
  }
  Node::State* state_;
  const bool cached_only_;
};

}  // namespace

Status NodeOptions::Validate() const {
  if (job.empty() || job.size() > 255 || job.find('/') != std::string::npos) {
    return Status::InvalidArgument("bad job id '" + job + "' (1-255 bytes, no '/')");
  }
  if (store_uri.empty()) return Status::InvalidArgument("no store given (the dataset's location)");
  if (socket_path.empty()) return Status::InvalidArgument("no trainer socket path given");
  STOKER_RETURN_IF_ERROR(net::CheckSecret(secret, "the node configuration"));
  if (peer_timeout.count() <= 0 || probe_timeout.count() <= 0) {
    return Status::InvalidArgument("node timeouts must be positive");
  }
  if (prefetch_streams < 1 || prefetch_streams > 64) {
    return Status::InvalidArgument(
        fmt::format("prefetch streams must be 1 to 64, not {}", prefetch_streams));
  }
  return Status::OK();
}

Node::State::~State() = default;

void Node::State::Log(const std::string& line) const {
  if (options.log) options.log(line);
}

uint64_t Node::State::ChunkSize(uint32_t index) const { return chunks[index].file_size; }

std::string Node::State::ChunkName(uint32_t index) const {
  return format::ChunkPath(chunks[index].id);
}

Status Node::State::Check(uint32_t index, std::span<const std::byte> bytes,
                          const std::string& source) const {
  return format::CheckChunk(bytes, chunks[index], source).status;
}

Status Node::State::FillFromStore(uint32_t index, ChunkFill& fill) {
  const std::string path = ChunkName(index);
  STOKER_ASSIGN_OR_RETURN(auto file, store->OpenRead(path));
  Status st;
  if (file->Size() != ChunkSize(index)) {
    st = Status::Corruption(fmt::format("{}: {} bytes, the metadata says {}", store->Describe(path),
                                        file->Size(), ChunkSize(index)));
  } else {
    std::atomic<uint64_t> bytes{0};
    auto read = [&](uint64_t offset, std::span<std::byte> dst) {
      bytes.fetch_add(dst.size());
      return file->ReadAt(offset, dst);
    };
    st = fill.From(read, store->Describe(path), kStorePiece);
    counters.store_bytes.fetch_add(bytes.load());
    if (st.ok()) counters.store_fills.fetch_add(1);
  }
  // Said here, by the daemon that read it: a peer waiting on this fill only hears that it
  // failed, and the trainers name the file, not where the damage was found.
  if (st.IsCorruption()) Log("the store's chunk is damaged: " + st.ToString());
  return st;
}

Status Node::State::FillFromPeer(size_t peer, uint32_t index, ChunkFill& fill, bool cached_only) {
  const std::string path = ChunkName(index);
  net::Client& client = cached_only ? *peer_cached[peer] : *peer_data[peer];
  std::atomic<uint64_t> bytes{0};
  auto read = [&](uint64_t offset, std::span<std::byte> dst) {
    bytes.fetch_add(dst.size());
    return client.Read(path, offset, dst);
  };
  Status st = fill.From(read, client.Describe(path), kPeerPiece);
  counters.peer_bytes.fetch_add(bytes.load());
  if (st.ok()) {
    counters.peer_fills.fetch_add(1);
    return st;
  }
  if (st.IsCorruption()) {
    counters.peer_corrupt.fetch_add(1);
  } else if (cached_only && st.IsNotFound()) {
    return st;
  }
  counters.peer_failures.fetch_add(1);
  // Whatever went wrong (dead, hung, corrupt, misconfigured), this peer is no use for now:
  // its heartbeats decide when it is back.
  membership->MarkDown(peer, st.WithContext("reading " + path));
  return st;
}

Status Node::State::FillFromOwners(uint32_t index, ChunkFill& fill) {
  const std::vector<size_t> ranking = membership->LiveRanking(chunks[index].id);
  auto it = ranking.begin();
  for (; it != ranking.end() && *it != membership->self(); ++it) {
    if (FillFromPeer(*it, index, fill, /*cached_only=*/false).ok()) return Status::OK();
  }
  // This daemon owns the chunk. Peers after it in the chunk's ranking stood in for it while it
  // was away (a restart), so before the store ask the next two whether they still hold it: a
  // miss costs a round trip, a hit saves a store read.
  constexpr int kAsked = 2;
  int asked = 0;
  for (++it; it != ranking.end() && asked < kAsked; ++it, ++asked) {
    if (FillFromPeer(*it, index, fill, /*cached_only=*/true).ok()) return Status::OK();
  }
  return FillFromStore(index, fill);
}

Status Node::State::Fill(uint32_t index, CachedChunk& out, bool from_peers) {
  const uint64_t id = chunks[index].id;
  const std::span<std::byte> dst = out.writable();
  if (disk != nullptr && disk->Read(id, dst).ok()) {
    if (Check(index, dst, "disk tier " + ChunkName(index)).ok()) {
      out.SetVerified(dst.size());
      return Status::OK();
    }
    disk->Remove(id);  // torn or stale: fetch it again
  }
  ChunkFill fill(out, chunks[index], ChunkName(index));
  STOKER_RETURN_IF_ERROR(from_peers ? FillFromOwners(index, fill) : FillFromStore(index, fill));
  if (disk != nullptr) disk->Write(id, dst);
  return Status::OK();
}

Status Node::State::ProbePeer(size_t peer) {
  net::Client& client = *peer_probe[peer];
  STOKER_ASSIGN_OR_RETURN(const uint64_t size, client.Stat(format::kManifestPath));
  // The size first: a peer's answer never sizes an allocation.
  std::string theirs;
  if (size == manifest.size()) {
    theirs.resize(size);
    STOKER_RETURN_IF_ERROR(
        client.Read(format::kManifestPath, 0, std::as_writable_bytes(std::span(theirs))));
  }
  if (size != manifest.size() || theirs != manifest) {
    return Status::InvalidArgument(
        fmt::format("peer {} serves another version of the dataset", client.Describe("")));
  }
  return Status::OK();
}

Result<std::shared_ptr<const CachedChunk>> Node::State::ForTrainer(uint32_t index) {
  cache->NoteUse(index);
  if (prefetcher) prefetcher->Wake();
  counters.trainer_gets.fetch_add(1);
  return cache->Get(index, ChunkSize(index), [this](uint32_t i, CachedChunk& out) {
    return Fill(i, out, /*from_peers=*/true);
  });
}

Result<std::shared_ptr<const CachedChunk>> Node::State::ForPeer(uint32_t index) {
  // A peer is answered at once when the cache is full of chunks in use: it reads the store
  // itself, where waiting for room here (while it may hold what this daemon's trainers wait
  // for) stalled two daemons with small caches until the peer timeout.
  return cache->Get(
      index, ChunkSize(index),
      [this](uint32_t i, CachedChunk& out) { return Fill(i, out, /*from_peers=*/false); },
      /*wait=*/false);
}

Node::Node(std::shared_ptr<State> state) : state_(std::move(state)) {}
Node::~Node() { Shutdown(); }

namespace {

// The store, the dataset's version in it, and that version's chunk records.
Status OpenVersion(Node::State& s) {
  const NodeOptions& o = s.options;
  // The store, never through a node daemon (this is the daemon).
  StorageOptions store_options;
  store_options.secret = o.secret;
  store_options.node_socket = "";
  STOKER_ASSIGN_OR_RETURN(s.store, OpenStorage(o.store_uri, store_options));
  STOKER_ASSIGN_OR_RETURN(s.dataset, Dataset::Open(s.store));
  // The version's identity: its record (trainers and peers must present the same).
  s.manifest = format::EncodeVersionRecord(dataset::ViewOf(*s.dataset).record());
  const dataset::VersionView& snap = dataset::ViewOf(*s.dataset);
  for (uint32_t i = 0; i < snap.chunk_count(); ++i) {
    STOKER_ASSIGN_OR_RETURN(const dataset::ChunkRef chunk, snap.chunk(i));
    s.chunks.push_back(chunk);
    s.chunk_index.emplace(chunk.id, i);
  }
  return Status::OK();
}

// The disk tier, if --disk-dir asks for one, keeping only this version's chunks.
Status OpenDiskTier(Node::State& s) {
  const NodeOptions& o = s.options;
  if (o.disk_dir.empty()) return Status::OK();
  std::set<uint64_t> ids;
  for (const auto& [id, index] : s.chunk_index) ids.insert(id);
  STOKER_ASSIGN_OR_RETURN(s.disk, DiskTier::Open(o.disk_dir + "/" + o.job, o.disk_limit, ids));
  return Status::OK();
}

Status CheckMemoryLimit(const Node::State& s) {
  uint64_t largest = 0;
  for (const format::ChunkInfo& chunk : s.chunks) largest = std::max(largest, chunk.file_size);
  if (s.options.memory_limit < largest) {
    return Status::InvalidArgument(
        fmt::format("--memory-limit {} is smaller than the dataset's largest chunk ({} bytes)",
                    s.options.memory_limit, largest));
  }
  return Status::OK();
}

Status StartPeerServer(Node::State& s) {
  const NodeOptions& o = s.options;
  server::ServerOptions so;
  so.host = o.listen.host;
  so.port = o.listen.port;
  so.storages.emplace(o.job, std::make_shared<PeerExport>(&s, /*cached_only=*/false));
  so.storages.emplace(o.job + std::string(kCachedOnlySuffix),
                      std::make_shared<PeerExport>(&s, /*cached_only=*/true));
  so.secret = o.secret;
  so.metrics_port = o.metrics_port;
  // Answer buffers of peer reads: four largest READs at once is plenty for a few peers, and
  // keeps the daemon's memory close to its cache limit.
  so.memory_limit = 4 * uint64_t{net::kMaxAnswerFrame};
  Node::State* raw = &s;
  so.extra_metrics = [raw] { return raw->ready.load() ? RenderNodeMetrics(raw->Stats()) : ""; };
  STOKER_ASSIGN_OR_RETURN(s.server, server::Server::Start(std::move(so)));
  return Status::OK();
}

// The membership (this daemon's address may be the peer server's bound port) and the cache,
// which asks the membership which chunks this daemon owns.
Status JoinMembership(Node::State& s) {
  const NodeOptions& o = s.options;
  net::ServerAddress self = o.advertise;
  if (self.host.empty()) self = {o.listen.host, s.server->port()};
  std::vector<net::ServerAddress> peers = o.peers.empty() ? std::vector{self} : o.peers;
  STOKER_ASSIGN_OR_RETURN(s.membership, Membership::Create(o.job, peers, self, o.membership));
  Node::State* raw = &s;
  s.cache = std::make_unique<ChunkCache>(o.memory_limit, [raw](uint32_t index) {
    return raw->membership->IsOwner(raw->chunks[index].id);
  });
  return Status::OK();
}

// Three clients per peer (data, cached-only data, heartbeats); null for this daemon.
Status ConnectToPeers(Node::State& s) {
  const NodeOptions& o = s.options;
  net::ClientOptions data_options;
  data_options.connect_timeout = std::max(o.probe_timeout, std::chrono::milliseconds(1000));
  data_options.request_timeout = o.peer_timeout;
  data_options.retry.max_attempts = 2;
  net::ClientOptions probe_options;
  probe_options.connect_timeout = o.probe_timeout;
  probe_options.request_timeout = o.probe_timeout;
  probe_options.retry.max_attempts = 1;
  probe_options.max_idle_connections = 1;
  for (size_t i = 0; i < s.membership->size(); ++i) {
    if (i == s.membership->self()) {
      s.peer_data.push_back(nullptr);
      s.peer_cached.push_back(nullptr);
      s.peer_probe.push_back(nullptr);
      continue;
    }
    const net::StokerUri uri{{s.membership->address(i)}, o.job};
    const net::StokerUri cached_uri{{s.membership->address(i)},
                                    o.job + std::string(kCachedOnlySuffix)};
    STOKER_ASSIGN_OR_RETURN(auto data, net::Client::Create(uri, o.secret, data_options));
    STOKER_ASSIGN_OR_RETURN(auto cached, net::Client::Create(cached_uri, o.secret, data_options));
    s.peer_cached.push_back(std::move(cached));
    STOKER_ASSIGN_OR_RETURN(auto probe, net::Client::Create(uri, o.secret, probe_options));
    s.peer_data.push_back(std::move(data));
    s.peer_probe.push_back(std::move(probe));
  }
  return Status::OK();
}

void StartHeartbeats(Node::State& s) {
  Node::State* raw = &s;
  s.membership->Start([raw](size_t peer) { return raw->ProbePeer(peer); },
                      [raw](size_t peer, bool live, const Status& why) {
                        const std::string who = raw->membership->address(peer).ToString();
                        raw->Log(live ? fmt::format("peer {} is back", who)
                                      : fmt::format("peer {} is down: {}", who, why.ToString()));
                      });
}

void StartPrefetcher(Node::State& s) {
  if (s.options.prefetch_depth == 0) return;
  Node::State* raw = &s;
  s.prefetcher = std::make_unique<Prefetcher>(
      s.options.prefetch_streams,
      [raw] { return raw->cache->PrefetchCandidates(raw->options.prefetch_depth); },
      [raw](uint32_t index) {
        auto got = raw->cache->Prefetch(
            index, raw->ChunkSize(index),
            [raw](uint32_t i, CachedChunk& out) { return raw->Fill(i, out, /*from_peers=*/true); });
        if (got) raw->counters.prefetches.fetch_add(1);
        return got.has_value();
      });
}

}  // namespace

Result<std::unique_ptr<Node>> Node::Start(NodeOptions options) {
  STOKER_RETURN_IF_ERROR(options.Validate());
  auto state = std::make_shared<State>(std::move(options));
  State& s = *state;
  STOKER_RETURN_IF_ERROR(OpenVersion(s));
  STOKER_RETURN_IF_ERROR(OpenDiskTier(s));
  STOKER_RETURN_IF_ERROR(CheckMemoryLimit(s));
  // The peer-facing server first: its bound port may be this daemon's identity.
  STOKER_RETURN_IF_ERROR(StartPeerServer(s));
  STOKER_RETURN_IF_ERROR(JoinMembership(s));
  STOKER_RETURN_IF_ERROR(ConnectToPeers(s));
  STOKER_RETURN_IF_ERROR(s.StartTrainerService());
  StartHeartbeats(s);
  StartPrefetcher(s);
  s.ready.store(true);
  return std::unique_ptr<Node>(new Node(std::move(state)));
}

uint16_t Node::port() const { return state_->server->port(); }
int Node::metrics_port() const { return state_->server->metrics_port(); }
const std::string& Node::socket_path() const { return state_->options.socket_path; }

NodeStats Node::stats() const { return state_->Stats(); }

NodeStats Node::State::Stats() const {
  const State& s = *this;
  NodeStats n;
  n.trainer_gets = s.counters.trainer_gets.load();
  n.trainer_connections = s.counters.trainer_connections.load();
  n.peer_requests = s.counters.peer_requests.load();
  n.store_fills = s.counters.store_fills.load();
  n.store_bytes = s.counters.store_bytes.load();
  n.peer_fills = s.counters.peer_fills.load();
  n.peer_bytes = s.counters.peer_bytes.load();
  n.peer_failures = s.counters.peer_failures.load();
  n.peer_corrupt = s.counters.peer_corrupt.load();
  n.prefetches = s.counters.prefetches.load();
  const ChunkCacheStats c = s.cache->stats();
  n.cache_hits = c.hits;
  n.cache_evictions = c.evictions;
  n.cache_bytes = c.live_bytes;
  n.cache_peak_bytes = c.peak_live_bytes;
  n.cache_capacity = s.cache->capacity();
  if (s.disk != nullptr) {
    const DiskTierStats d = s.disk->stats();
    n.disk_hits = d.hits;
    n.disk_bytes = d.bytes;
    n.disk_limit = d.limit;
  }
  for (const PeerState& p : s.membership->Snapshot()) {
    ++n.peers_total;
    n.peers_live += p.live ? 1 : 0;
  }
  return n;
}

std::string RenderNodeMetrics(const NodeStats& n) {
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, uint64_t value) {
    out += fmt::format("# HELP {0} {1}\n# TYPE {0} {2}\n{0} {3}\n", name, help, type, value);
  };
  metric("stoker_node_trainer_gets_total", "counter", "Chunks handed to local trainers.",
         n.trainer_gets);
  metric("stoker_node_trainer_connections", "gauge", "Trainer connections open.",
         n.trainer_connections);
  metric("stoker_node_peer_requests_total", "counter", "Chunk opens served to other daemons.",
         n.peer_requests);
  metric("stoker_node_store_fills_total", "counter", "Chunks read from the store.", n.store_fills);
  metric("stoker_node_store_bytes_total", "counter", "Bytes read from the store.", n.store_bytes);
  metric("stoker_node_peer_fills_total", "counter", "Chunks read from their owner.", n.peer_fills);
  metric("stoker_node_peer_bytes_total", "counter", "Bytes read from other daemons.", n.peer_bytes);
  metric("stoker_node_peer_failures_total", "counter",
         "Peer reads that failed (the next peer or the store took over).", n.peer_failures);
  metric("stoker_node_peer_corrupt_total", "counter", "Chunks from a peer that failed the check.",
         n.peer_corrupt);
  metric("stoker_node_prefetches_total", "counter", "Chunks prefetched.", n.prefetches);
  metric("stoker_node_cache_hits_total", "counter", "Chunk requests answered from the cache.",
         n.cache_hits);
  metric("stoker_node_cache_evictions_total", "counter", "Chunks evicted.", n.cache_evictions);
  metric("stoker_node_cache_bytes", "gauge", "Bytes of cached and in-use chunks.", n.cache_bytes);
  metric("stoker_node_cache_peak_bytes", "gauge", "Most chunk bytes held at once.",
         n.cache_peak_bytes);
  metric("stoker_node_cache_capacity_bytes", "gauge", "The cache's hard limit.", n.cache_capacity);
  metric("stoker_node_disk_hits_total", "counter", "Chunks read back from the disk tier.",
         n.disk_hits);
  metric("stoker_node_disk_bytes", "gauge", "Bytes of chunks in the disk tier.", n.disk_bytes);
  metric("stoker_node_disk_limit_bytes", "gauge", "The disk tier's limit (0: no disk tier).",
         n.disk_limit);
  metric("stoker_node_peers_live", "gauge", "Peers this daemon considers alive (itself included).",
         n.peers_live);
  return out;
}

void Node::Shutdown() {
  State& s = *state_;
  if (s.prefetcher) s.prefetcher->Stop();  // waits for its fetches under way
  s.StopTrainerService();
  if (s.cache) s.cache->StopFills();  // before what the fills use (peers, the store) goes
  if (s.membership) s.membership->Stop();
  if (s.server) s.server->Shutdown();
}

void Node::Abort() {
  if (state_->server) state_->server->Abort();
  Shutdown();
}

}  // namespace stoker::node
