// The node daemon's chunk cache: a hard memory cap, one fetch per chunk however many ask
// (single flight), chunks handed out while they fill (cut-through: a reader waits for the bytes
// it needs, CachedChunk::WaitFor), and eviction driven by the trainers' known future order.
//
// Eviction. Trainers send their plan (the chunks of an epoch in first-use order, known in
// advance because the sampler is deterministic, each with the entry until which it stays in use,
// see PlannedFile). A chunk's next use is its distance ahead of the plan's cursor (the furthest
// entry that plan's trainer has asked for), 0 while it is in use, and a chunk no plan needs
// again is "done". Victims, first to last:
//   1. done and not owned here (a copy fetched from its owner for a local trainer),
//   2. done and owned here, most recently used first: an owner keeps a stable set when the
//      dataset is larger than the job's memory, instead of cycling every chunk through the
//      cache (LRU on a cyclic or shuffled scan hits nothing),
//   3. needed again, furthest next use first (Belady).
// A chunk someone still holds (a fill under way, a trainer lease being sent, a peer transfer)
// is never a victim; its bytes still count against the cap until released.
//
// Thread-safety: all methods may be called concurrently.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "node_client/cached_chunk.h"
#include "stoker/status.h"

namespace stoker::node {

struct ChunkCacheStats {
  uint64_t hits = 0;            // Get answered from the cache (or from a fetch already running)
  uint64_t fetches = 0;         // fills started
  uint64_t fetch_failures = 0;  // fills that failed (every waiter got the error)
  uint64_t evictions = 0;
  uint64_t bytes_fetched = 0;
  uint64_t live_bytes = 0;  // bytes of every cached or in-use chunk (<= capacity)
  uint64_t peak_live_bytes = 0;
  uint64_t entries = 0;
  uint64_t fills_running = 0;  // Get's fills under way
};

class ChunkCache {
 public:
  // Fills a chunk (out.writable(), out.size() bytes), e.g. from the store or a peer, moving its
  // verified marks over what it has checked as it goes. OK: the whole chunk is there and
  // checked (the cache seals it).
  using Filler = std::function<Status(uint32_t chunk, CachedChunk& out)>;

  // `is_owned(chunk)`: whether this node owns the chunk right now (placement may change).
  // `wait_for_room`: how long Get waits for held chunks to be released when the cache is full.
  ChunkCache(uint64_t capacity_bytes, std::function<bool(uint32_t)> is_owned,
             std::chrono::milliseconds wait_for_room = std::chrono::seconds(30));
  ~ChunkCache();

  // The chunk, cached or still filling: a chunk not cached gets a new memfd of `size` bytes and
  // its fill starts on a thread of the cache's; the caller reads what it needs once verified
  // (CachedChunk::WaitFor; a failed fill fails those waits, and the next Get tries again).
  // Concurrent calls for one chunk share a single fill. ResourceExhausted if `size` exceeds the
  // capacity or no room frees up in time (`wait`: up to wait_for_room; else at once, for a
  // peer, which can read the store itself rather than wait); Unavailable once StopFills() ran.
  Result<std::shared_ptr<const CachedChunk>> Get(uint32_t chunk, uint64_t size, const Filler& fill,
                                                 bool wait = true);
  // Fills in the caller's thread and returns once the chunk is complete (or the fill's error),
  // and only if it fits without evicting anything needed sooner than it (prefetching must never
  // push out what a trainer is about to read): Unavailable otherwise.
  Result<std::shared_ptr<const CachedChunk>> Prefetch(uint32_t chunk, uint64_t size,
                                                      const Filler& fill);
  bool Contains(uint32_t chunk) const;  // cached or filling
  // The chunk if it is cached and complete now (null otherwise); never fills.
  std::shared_ptr<const CachedChunk> Peek(uint32_t chunk);
  // Waits for the fills under way; later Gets start none. (Before what the fills use goes away.)
  void StopFills();

  // Plans: one per trainer, replaced each epoch, removed when the trainer goes away.
  uint64_t AddPlan();
  struct PlannedChunk {
    uint32_t chunk;         // the chunk's index in the metadata
    uint32_t position;      // its entry in the trainer's first-use order
    uint32_t in_use_until;  // the entry until which it is in use (>= position)
  };
  void SetPlan(uint64_t plan, const std::vector<PlannedChunk>& chunks);
  void RemovePlan(uint64_t plan);
  // A local trainer asked for `chunk`: moves the cursor of every plan that contains it.
  void NoteUse(uint32_t chunk);
  // Chunks the plans need next (up to `depth` ahead of each cursor) that are not cached or
  // being fetched: what a prefetcher should fetch, nearest first.
  std::vector<uint32_t> PrefetchCandidates(size_t depth) const;

  ChunkCacheStats stats() const;
  uint64_t capacity() const { return capacity_; }

 private:
  struct Entry {
    std::shared_ptr<const CachedChunk> chunk;  // complete, or filling (its fill holds it too)
    uint64_t last_use = 0;
  };
  struct Plan {
    struct Use {
      uint32_t position, in_use_until;
    };
    std::unordered_map<uint32_t, Use> uses;  // by chunk
    uint32_t cursor = 0;
  };
  static constexpr uint64_t kDone = ~uint64_t{0};

  // `wait`: for room, up to wait_for_room_ (prefetches never wait).
  Result<std::shared_ptr<const CachedChunk>> GetImpl(uint32_t chunk, uint64_t size,
                                                     const Filler& fill, bool prefetch, bool wait);
  uint64_t NextUseLocked(uint32_t chunk) const;
  // Evicts until `size` more bytes fit; false if it cannot now. With `limit` != kDone, only
  // chunks whose next use is beyond `limit` may go.
  bool MakeRoomLocked(uint64_t size, uint64_t limit);
  // Runs `fill` into `chunk`, then seals it, or fails it and forgets it.
  Status RunFill(uint32_t index, const std::shared_ptr<CachedChunk>& chunk, const Filler& fill);
  void ReapFillsLocked();

  const uint64_t capacity_;
  const std::function<bool(uint32_t)> is_owned_;
  const std::chrono::milliseconds wait_for_room_;
  // Shared with every chunk's deleter, which may run after the cache is gone (a peer transfer
  // or the daemon's last lease), and without mu_ (it may run while mu_ is held).
  struct Shared {
    std::atomic<uint64_t> live_bytes{0};
    std::condition_variable cv;  // a fill finished or a chunk was released; waits poll too
  };
  mutable std::mutex mu_;
  std::shared_ptr<Shared> shared_;
  std::unordered_map<uint32_t, Entry> entries_;
  std::unordered_map<uint64_t, Plan> plans_;
  struct FillThread {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<FillThread> fills_;  // Get's fills, joined when done or by StopFills
  bool stopping_ = false;
  uint64_t next_plan_ = 1;
  uint64_t use_clock_ = 0;
  ChunkCacheStats stats_;
};

}  // namespace stoker::node
