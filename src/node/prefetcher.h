// Fetches the chunks that the trainers' plans need soon, several at once.
//
// One chunk at a time (as the daemon first did) leaves the store's link idle between fills:
// each chunk is read whole, checked, and — for a chunk another daemon owns — first travels
// store → owner → here, so a single stream spends most of its time waiting on round trips and
// on the other hop. `streams` threads each take the nearest needed chunk that no other is
// fetching; the cache's own rules (room without evicting anything needed sooner) still decide
// whether a fetch happens.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace stoker::node {

class Prefetcher {
 public:
  // What to fetch, nearest first (chunks neither cached nor being filled).
  using Candidates = std::function<std::vector<uint32_t>()>;
  // Fetches one chunk into the cache; false if it could not (no room, the fill failed).
  using Fetch = std::function<bool(uint32_t chunk)>;

  Prefetcher(size_t streams, Candidates candidates, Fetch fetch);
  ~Prefetcher();  // Stop()s
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Something changed (a trainer moved on, a plan arrived): look again now, not at the next
  // idle tick.
  void Wake();
  // No new fetches; waits for those under way. Idempotent; Wake() stays safe afterwards (the
  // daemon stops it while trainer threads may still call Wake).
  void Stop();

 private:
  void Run();

  const Candidates candidates_;
  const Fetch fetch_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;     // guarded by mu_
  std::set<uint32_t> taken_;  // chunks a stream is fetching; guarded by mu_
  uint64_t finished_ = 0;     // fetches completed so far; guarded by mu_
  std::vector<std::thread> streams_;
};

}  // namespace stoker::node
