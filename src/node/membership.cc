#include "node/membership.h"

#include <algorithm>
#include <set>

#include "common/hash.h"

namespace stoker::node {

Result<std::unique_ptr<Membership>> Membership::Create(std::string job,
                                                       std::vector<net::ServerAddress> peers,
                                                       const net::ServerAddress& self,
                                                       MembershipOptions options) {
  if (job.empty()) return Err(Status::InvalidArgument("the job id must not be empty"));
  if (options.heartbeat_interval.count() <= 0 || options.misses_to_down < 1) {
    return Err(Status::InvalidArgument("heartbeat interval and misses must be positive"));
  }
  std::set<std::string> seen;
  size_t self_index = peers.size();
  for (size_t i = 0; i < peers.size(); ++i) {
    const std::string id = peers[i].ToString();
    if (!seen.insert(id).second) {
      return Err(Status::InvalidArgument("peer " + id + " is listed twice"));
    }
    if (id == self.ToString()) self_index = i;
  }
  if (self_index == peers.size()) {
    return Err(Status::InvalidArgument("this daemon's address " + self.ToString() +
                                       " is not among the peers (list every daemon of the job, "
                                       "this one included, as host:port)"));
  }
  return std::unique_ptr<Membership>(
      new Membership(std::move(job), std::move(peers), self_index, options));
}

Membership::Membership(std::string job, std::vector<net::ServerAddress> peers, size_t self,
                       MembershipOptions options)
    : job_(std::move(job)), options_(options), self_(self) {
  for (size_t i = 0; i < peers.size(); ++i) {
    ids_.push_back(peers[i].ToString());
    peers_.push_back(PeerState{std::move(peers[i]), true, i == self, 0, 0});
  }
}

Membership::~Membership() { Stop(); }

void Membership::Start(Probe probe, OnChange on_change) {
  probe_ = std::move(probe);
  on_change_ = std::move(on_change);
  for (size_t i = 0; i < peers_.size(); ++i) {
    if (i != self_) threads_.emplace_back([this, i] { Heartbeat(i); });
  }
}

void Membership::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

void Membership::Heartbeat(size_t peer) {
  int misses = 0;
  std::unique_lock lock(mu_);
  while (!stopping_) {
    lock.unlock();
    const Status st = probe_(peer);
    lock.lock();
    misses = st.ok() ? 0 : misses + 1;
    bool changed = false;
    if (st.ok()) {
      changed = SetLiveLocked(peer, true);
    } else if (misses >= options_.misses_to_down) {
      changed = SetLiveLocked(peer, false);
    }
    if (changed && on_change_) {
      lock.unlock();
      on_change_(peer, st.ok(), st.ok() ? st : st.WithContext("missed heartbeats"));
      lock.lock();
    }
    stop_cv_.wait_for(lock, options_.heartbeat_interval, [&] { return stopping_; });
  }
}

bool Membership::SetLiveLocked(size_t peer, bool live) {
  PeerState& p = peers_[peer];
  if (p.live == live || p.self) return false;
  p.live = live;
  ++(live ? p.ups : p.downs);
  return true;
}

void Membership::MarkDown(size_t peer, const Status& why) {
  bool changed;
  {
    std::lock_guard lock(mu_);
    changed = SetLiveLocked(peer, false);
  }
  if (changed && on_change_) on_change_(peer, false, why);
}

bool Membership::IsLive(size_t peer) const {
  std::lock_guard lock(mu_);
  return peers_[peer].live;
}

std::vector<size_t> Membership::LiveRanking(uint64_t chunk_id) const {
  std::vector<std::pair<uint64_t, size_t>> weights;
  weights.reserve(peers_.size());
  std::string key = job_;
  key.push_back('\0');
  key.append(reinterpret_cast<const char*>(&chunk_id), sizeof chunk_id);
  key.push_back('\0');
  const size_t prefix = key.size();
  {
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < peers_.size(); ++i) {
      if (!peers_[i].live) continue;
      key.resize(prefix);
      key += ids_[i];
      weights.emplace_back(Hash64(key), i);
    }
  }
  // Highest weight first; ties (practically impossible) by peer index so everyone agrees.
  std::sort(weights.begin(), weights.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::vector<size_t> out;
  out.reserve(weights.size());
  for (const auto& [w, i] : weights) out.push_back(i);
  return out;
}

bool Membership::IsOwner(uint64_t chunk_id) const {
  const auto ranking = LiveRanking(chunk_id);
  return !ranking.empty() && ranking.front() == self_;
}

std::vector<PeerState> Membership::Snapshot() const {
  std::lock_guard lock(mu_);
  return peers_;
}

}  // namespace stoker::node
