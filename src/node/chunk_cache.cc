#include "node/chunk_cache.h"

#include <algorithm>
#include <tuple>

#include <fmt/format.h>

namespace stoker::node {

ChunkCache::ChunkCache(uint64_t capacity_bytes, std::function<bool(uint32_t)> is_owned,
                       std::chrono::milliseconds wait_for_room)
    : capacity_(capacity_bytes),
      is_owned_(std::move(is_owned)),
      wait_for_room_(wait_for_room),
      shared_(std::make_shared<Shared>()) {}

ChunkCache::~ChunkCache() { StopFills(); }

void ChunkCache::StopFills() {
  std::vector<FillThread> fills;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    fills.swap(fills_);
  }
  for (FillThread& f : fills) f.thread.join();
}

void ChunkCache::ReapFillsLocked() {
  std::erase_if(fills_, [](FillThread& f) {
    if (!f.done->load()) return false;
    f.thread.join();  // it has returned (or is returning) from RunFill
    return true;
  });
}

bool ChunkCache::Contains(uint32_t chunk) const {
  std::lock_guard lock(mu_);
  return entries_.contains(chunk);
}

std::shared_ptr<const CachedChunk> ChunkCache::Peek(uint32_t chunk) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(chunk);
  if (it == entries_.end() || !it->second.chunk->complete()) return nullptr;
  it->second.last_use = ++use_clock_;
  ++stats_.hits;
  return it->second.chunk;
}

uint64_t ChunkCache::NextUseLocked(uint32_t chunk) const {
  uint64_t best = kDone;
  for (const auto& [id, plan] : plans_) {
    auto it = plan.uses.find(chunk);
    if (it == plan.uses.end()) continue;
    if (it->second.position >= plan.cursor) {
      best = std::min<uint64_t>(best, it->second.position - plan.cursor);
    } else if (it->second.in_use_until >= plan.cursor) {
      best = 0;  // being read right now
    }
  }
  return best;
}

bool ChunkCache::MakeRoomLocked(uint64_t size, uint64_t limit) {
  while (shared_->live_bytes.load() + size > capacity_) {
    // Rank every evictable entry (ready, held by nobody else); the largest key goes first.
    using Key = std::tuple<int, uint64_t>;
    std::unordered_map<uint32_t, Entry>::iterator victim = entries_.end();
    Key victim_key{};
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      const Entry& e = it->second;
      if (e.chunk.use_count() > 1) continue;  // held: by its fill, a reader, a transfer
      const uint64_t next = NextUseLocked(it->first);
      if (limit != kDone && next <= limit) continue;
      Key key;
      if (next != kDone) {
        key = {1, next};  // Belady: furthest next use first
      } else if (!is_owned_(it->first)) {
        key = {3, ~e.last_use};  // copies of others' chunks, least recently used first
      } else {
        key = {2, e.last_use};  // own chunks, most recently used first
      }
      if (victim == entries_.end() || key > victim_key) {
        victim = it;
        victim_key = key;
      }
    }
    if (victim == entries_.end()) return false;
    entries_.erase(victim);  // the chunk's deleter gives its bytes back to live_bytes
    ++stats_.evictions;
  }
  return true;
}

Result<std::shared_ptr<const CachedChunk>> ChunkCache::Get(uint32_t chunk, uint64_t size,
                                                           const Filler& fill, bool wait) {
  return GetImpl(chunk, size, fill, /*prefetch=*/false, wait);
}

Result<std::shared_ptr<const CachedChunk>> ChunkCache::Prefetch(uint32_t chunk, uint64_t size,
                                                                const Filler& fill) {
  return GetImpl(chunk, size, fill, /*prefetch=*/true, /*wait=*/false);
}

Result<std::shared_ptr<const CachedChunk>> ChunkCache::GetImpl(uint32_t chunk, uint64_t size,
                                                               const Filler& fill, bool prefetch,
                                                               bool wait) {
  if (size > capacity_) {
    return Err(Status::ResourceExhausted(fmt::format(
        "chunk {} has {} bytes, more than the whole cache ({} bytes)", chunk, size, capacity_)));
  }
  std::unique_lock lock(mu_);
  const auto deadline =
      std::chrono::steady_clock::now() + (wait ? wait_for_room_ : std::chrono::milliseconds(0));
  while (true) {
    auto it = entries_.find(chunk);
    if (it != entries_.end()) {
      Entry& e = it->second;
      e.last_use = ++use_clock_;
      ++stats_.hits;
      return e.chunk;  // complete, or filling: the caller waits for what it reads
    }
    if (stopping_) {
      return Err(Status::Unavailable("the node daemon is shutting down"));
    }
    const uint64_t limit = prefetch ? NextUseLocked(chunk) : kDone;
    if (MakeRoomLocked(size, limit)) break;
    if (prefetch) return Err(Status::Unavailable("no room to prefetch"));
    // Everything left is held by someone (trainer leases being sent, peer transfers): wait for
    // a release. Deleters notify without the lock, so poll as well.
    if (std::chrono::steady_clock::now() >= deadline) {
      return Err(Status::ResourceExhausted(fmt::format(
          "the chunk cache is full of chunks in use ({} of {} bytes) and chunk {} needs {}",
          shared_->live_bytes.load(), capacity_, chunk, size)));
    }
    shared_->cv.wait_for(lock, std::chrono::milliseconds(20));
  }

  // Create the memfd under the lock, so its bytes count before anyone else makes room.
  const std::string name = fmt::format("stoker-chunk-{}", chunk);
  auto created = CachedChunk::Create(name, size, &shared_->live_bytes);
  if (!created) return Err(created.error());
  stats_.peak_live_bytes = std::max(stats_.peak_live_bytes, shared_->live_bytes.load());
  // The deleter keeps the accounting alive and wakes anyone waiting for room.
  std::shared_ptr<Shared> shared = shared_;
  std::shared_ptr<CachedChunk> filling(created->release(), [shared](CachedChunk* c) {
    delete c;
    shared->cv.notify_all();
  });
  entries_[chunk] = Entry{filling, ++use_clock_};
  ++stats_.fetches;
  if (prefetch) {
    lock.unlock();
    STOKER_RETURN_IF_ERROR(RunFill(chunk, filling, fill));
    return std::shared_ptr<const CachedChunk>(filling);
  }
  ReapFillsLocked();
  auto done = std::make_shared<std::atomic<bool>>(false);
  fills_.push_back({std::thread([this, chunk, filling, fill, done]() mutable {
                      (void)RunFill(chunk, filling, fill);
                      filling.reset();  // done means released: the chunk may be evicted now
                      done->store(true);
                    }),
                    done});
  return std::shared_ptr<const CachedChunk>(filling);
}

Status ChunkCache::RunFill(uint32_t index, const std::shared_ptr<CachedChunk>& chunk,
                           const Filler& fill) {
  Status st = fill(index, *chunk);
  if (st.ok()) st = chunk->Seal();
  if (!st.ok()) chunk->Fail();
  {
    std::lock_guard lock(mu_);
    if (st.ok()) {
      stats_.bytes_fetched += chunk->size();
    } else {
      ++stats_.fetch_failures;
      auto it = entries_.find(index);
      if (it != entries_.end() && it->second.chunk == chunk) entries_.erase(it);
    }
  }
  shared_->cv.notify_all();
  return st;
}

uint64_t ChunkCache::AddPlan() {
  std::lock_guard lock(mu_);
  const uint64_t id = next_plan_++;
  plans_[id];
  return id;
}

void ChunkCache::SetPlan(uint64_t plan, const std::vector<PlannedChunk>& chunks) {
  Plan p;
  p.uses.reserve(chunks.size());
  for (const PlannedChunk& c : chunks) {
    p.uses.try_emplace(c.chunk, Plan::Use{c.position, std::max(c.position, c.in_use_until)});
  }
  std::lock_guard lock(mu_);
  plans_[plan] = std::move(p);
}

void ChunkCache::RemovePlan(uint64_t plan) {
  std::lock_guard lock(mu_);
  plans_.erase(plan);
}

void ChunkCache::NoteUse(uint32_t chunk) {
  std::lock_guard lock(mu_);
  for (auto& [id, plan] : plans_) {
    auto it = plan.uses.find(chunk);
    if (it != plan.uses.end()) plan.cursor = std::max(plan.cursor, it->second.position);
  }
}

std::vector<uint32_t> ChunkCache::PrefetchCandidates(size_t depth) const {
  std::lock_guard lock(mu_);
  std::vector<std::pair<uint64_t, uint32_t>> wanted;  // (distance, chunk)
  for (const auto& [id, plan] : plans_) {
    for (const auto& [chunk, use] : plan.uses) {
      const uint32_t pos = use.position;
      if (pos < plan.cursor || pos - plan.cursor >= depth) continue;
      if (!entries_.contains(chunk)) wanted.emplace_back(pos - plan.cursor, chunk);
    }
  }
  std::sort(wanted.begin(), wanted.end());
  std::vector<uint32_t> out;
  for (const auto& [distance, chunk] : wanted) {
    if (std::find(out.begin(), out.end(), chunk) == out.end()) out.push_back(chunk);
  }
  return out;
}

ChunkCacheStats ChunkCache::stats() const {
  std::lock_guard lock(mu_);
  ChunkCacheStats s = stats_;
  s.live_bytes = shared_->live_bytes.load();
  s.entries = entries_.size();
  s.fills_running = static_cast<uint64_t>(std::count_if(
      fills_.begin(), fills_.end(), [](const FillThread& f) { return !f.done->load(); }));
  return s;
}

}  // namespace stoker::node
