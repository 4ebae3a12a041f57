// Who owns which chunk: the job's peers (host:port, never a rank), which of them are alive, and
// rendezvous (highest-random-weight) placement over the live ones (docs/cache.md).
//
// A chunk's ranking orders all peers by XXH3(job ‖ chunk id ‖ peer); its owner is the first live
// peer in it. When a peer dies only its chunks move (each to the next live peer of its own
// ranking), and they move back when it returns. No coordinator, and every daemon computes the
// same placement from the same live set.
//
// Liveness: a heartbeat thread per other peer probes it every `heartbeat_interval`; a peer that
// fails `misses_to_down` probes in a row (or a data read, see MarkDown) is down, and one
// successful probe brings it back. A dead peer is therefore noticed within about
// misses_to_down × (interval + probe timeout), and at once when a read to it fails.
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "net/uri.h"
#include "stoker/status.h"

namespace stoker::node {

struct MembershipOptions {
  std::chrono::milliseconds heartbeat_interval{250};
  int misses_to_down = 2;
};

struct PeerState {
  net::ServerAddress address;
  bool live = true;
  bool self = false;
  uint64_t downs = 0;  // times marked down
  uint64_t ups = 0;    // times it came back
};

class Membership {
 public:
  // A probe answers OK if the peer is up and serving this job (it carries its own timeout).
  using Probe = std::function<Status(size_t peer)>;

  // `peers` lists every daemon of the job, `self` among them (InvalidArgument otherwise, or on
  // duplicates). Peers start live: a daemon starting with the job must not stampede the store.
  static Result<std::unique_ptr<Membership>> Create(std::string job,
                                                    std::vector<net::ServerAddress> peers,
                                                    const net::ServerAddress& self,
                                                    MembershipOptions options);
  ~Membership();  // Stop()

  // Called (from a heartbeat or reading thread, without locks held) whenever a peer goes down
  // or comes back, with the reason it went down.
  using OnChange = std::function<void(size_t peer, bool live, const Status& why)>;

  // Starts the heartbeat threads (none if there is only this daemon).
  void Start(Probe probe, OnChange on_change = nullptr);
  void Stop();

  size_t size() const { return peers_.size(); }
  size_t self() const { return self_; }
  const net::ServerAddress& address(size_t peer) const { return peers_[peer].address; }
  // Live peers for `chunk_id`, best first; this daemon is always live to itself.
  std::vector<size_t> LiveRanking(uint64_t chunk_id) const;
  bool IsOwner(uint64_t chunk_id) const;
  bool IsLive(size_t peer) const;
  // A read from `peer` failed: down until a heartbeat succeeds.
  void MarkDown(size_t peer, const Status& why);
  std::vector<PeerState> Snapshot() const;

 private:
  Membership(std::string job, std::vector<net::ServerAddress> peers, size_t self,
             MembershipOptions options);
  void Heartbeat(size_t peer);
  // True if this changed the peer's state (mu_ held).
  bool SetLiveLocked(size_t peer, bool live);

  const std::string job_;
  const MembershipOptions options_;
  std::vector<PeerState> peers_;  // addresses fixed; the rest guarded by mu_
  std::vector<std::string> ids_;  // "host:port" per peer (what the placement hashes)
  size_t self_ = 0;
  Probe probe_;
  OnChange on_change_;
  mutable std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace stoker::node
