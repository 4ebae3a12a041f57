#include "node/prefetcher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace stoker::node {
namespace {

using namespace std::chrono_literals;

// Chunks 0..9 are wanted until fetched. A fetch waits until `expect` fetches run at once (or one
// has waited 5 s), so the most seen at once is the concurrency the prefetcher really uses.
struct GatedChunks {
  explicit GatedChunks(int at_once) : expect(at_once) {}

  std::vector<uint32_t> Wanted() {
    std::lock_guard lock(mu);
    std::vector<uint32_t> out;
    for (uint32_t c = 0; c < 10; ++c) {
      if (!fetched.contains(c)) out.push_back(c);
    }
    return out;
  }

  bool Fetch(uint32_t chunk) {
    std::unique_lock lock(mu);
    ++running;
    most = std::max(most, running);
    ++times[chunk];
    concurrent_same = concurrent_same || in_flight.contains(chunk);
    in_flight.insert(chunk);
    cv.notify_all();
    if (!cv.wait_for(lock, 5s, [&] { return most >= expect || gave_up; })) gave_up = true;
    cv.notify_all();
    in_flight.erase(chunk);
    fetched.insert(chunk);
    --running;
    cv.notify_all();
    return true;
  }

  bool AllFetched(std::chrono::seconds within) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, within, [&] { return fetched.size() == 10; });
  }

  const int expect;
  std::mutex mu;
  std::condition_variable cv;
  std::set<uint32_t> fetched, in_flight;
  std::map<uint32_t, int> times;
  int running = 0, most = 0;
  bool gave_up = false, concurrent_same = false;
};

TEST(Prefetcher, FetchesSeveralChunksAtOnceEachOnce) {
  GatedChunks chunks(4);
  {
    Prefetcher p(4, [&] { return chunks.Wanted(); }, [&](uint32_t c) { return chunks.Fetch(c); });
    p.Wake();
    ASSERT_TRUE(chunks.AllFetched(30s));
  }
  std::lock_guard lock(chunks.mu);
  EXPECT_EQ(chunks.most, 4);  // one stream only would have given 1
  EXPECT_FALSE(chunks.gave_up);
  EXPECT_FALSE(chunks.concurrent_same);  // no chunk fetched by two streams at once
  for (const auto& [chunk, n] : chunks.times) EXPECT_EQ(n, 1) << "chunk " << chunk;
}

TEST(Prefetcher, OneStreamFetchesOneAtATime) {
  GatedChunks chunks(1);
  {
    Prefetcher p(1, [&] { return chunks.Wanted(); }, [&](uint32_t c) { return chunks.Fetch(c); });
    ASSERT_TRUE(chunks.AllFetched(30s));
  }
  EXPECT_EQ(chunks.most, 1);
}

// A fetch that cannot happen (no room) is not retried in a busy loop: the stream waits for the
// idle tick or a Wake.
TEST(Prefetcher, AFailedFetchIsNotRetriedInABusyLoop) {
  std::atomic<int> calls{0};
  {
    Prefetcher p(
        2, [] { return std::vector<uint32_t>{7}; },
        [&](uint32_t) {
          calls.fetch_add(1);
          return false;
        });
    std::this_thread::sleep_for(500ms);
  }
  // 2 streams × (1 + 500 ms / 200 ms idle) ≈ 6; a busy loop would make thousands.
  EXPECT_GE(calls.load(), 1);
  EXPECT_LE(calls.load(), 20);
}

TEST(Prefetcher, StopsWhileIdleAndWakeAfterStopIsHarmless) {
  Prefetcher p(3, [] { return std::vector<uint32_t>{}; }, [](uint32_t) { return true; });
  p.Wake();
  p.Stop();
  p.Wake();
  p.Stop();
}  // the destructor must return too

}  // namespace
}  // namespace stoker::node
