#include "node/chunk_cache.h"

#include <gtest/gtest.h>

#include <fcntl.h>

#include <atomic>
#include <cstring>
#include <thread>

namespace stoker::node {
namespace {

constexpr uint64_t kChunk = 4096;

// A plan read one chunk at a time: each chunk is in use only until the next is first read.
std::vector<ChunkCache::PlannedChunk> Sequential(const std::vector<uint32_t>& order) {
  std::vector<ChunkCache::PlannedChunk> out;
  out.reserve(order.size());
  for (uint32_t i = 0; i < order.size(); ++i) out.push_back({order[i], i, i});
  return out;
}

// Fills chunk i with the byte i, counting fills per chunk.
struct CountingFiller {
  std::atomic<int> fills{0};
  std::chrono::milliseconds delay{0};
  ChunkCache::Filler Get() {
    return [this](uint32_t chunk, CachedChunk& out) {
      fills.fetch_add(1);
      std::this_thread::sleep_for(delay);
      std::memset(out.writable().data(), static_cast<int>(chunk & 0xff), out.size());
      return Status::OK();
    };
  }
};

// Get, and wait until every fill under way has ended (and let go of its chunk): the tests of
// eviction need the cache at rest.
Result<std::shared_ptr<const CachedChunk>> GetWhole(ChunkCache& cache, uint32_t chunk,
                                                    uint64_t size, const ChunkCache::Filler& f) {
  auto got = cache.Get(chunk, size, f);
  while (cache.stats().fills_running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (got && !(*got)->complete()) return Err(Status::Internal("the fill did not complete"));
  return got;
}

TEST(ChunkCacheTest, ConcurrentGetsShareOneFill) {
  ChunkCache cache(16 * kChunk, [](uint32_t) { return true; });
  CountingFiller filler;
  filler.delay = std::chrono::milliseconds(50);
  std::vector<std::thread> threads;
  std::atomic<int> right{0};
  threads.reserve(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      auto c = cache.Get(7, kChunk, filler.Get());
      if (c && (*c)->size() == kChunk && (*c)->WaitFor(0, kChunk, std::chrono::seconds(5)).ok() &&
          (*c)->bytes()[100] == std::byte{7}) {
        right.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(filler.fills.load(), 1);
  EXPECT_EQ(right.load(), 8);
  const int fd = (*GetWhole(cache, 7, kChunk, filler.Get()))->fd();
  EXPECT_EQ(CheckChunkFd(fd, kChunk), ChunkFdLayout::kWithMarks);
  EXPECT_TRUE(::fcntl(fd, F_GET_SEALS) & F_SEAL_FUTURE_WRITE);  // complete: no more writing
}

// Readers get a chunk while it fills, and the verified bytes as soon as the filler vouches for
// them: the first half while the second has not come.
TEST(ChunkCacheTest, ReadersGetVerifiedBytesBeforeTheFillEnds) {
  ChunkCache cache(16 * kChunk, [](uint32_t) { return true; });
  std::atomic<bool> release{false};
  auto halves = [&](uint32_t, CachedChunk& out) {
    std::memset(out.writable().data(), 0x11, kChunk / 2);
    out.SetVerified(kChunk / 2);
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::memset(out.writable().data() + kChunk / 2, 0x22, kChunk / 2);
    return Status::OK();
  };
  auto c = cache.Get(3, kChunk, halves);
  ASSERT_TRUE(c.has_value());
  ASSERT_TRUE((*c)->WaitFor(0, kChunk / 2, std::chrono::seconds(5)).ok());
  EXPECT_EQ((*c)->bytes()[kChunk / 2 - 1], std::byte{0x11});
  EXPECT_FALSE((*c)->complete());
  EXPECT_EQ(cache.Peek(3), nullptr);  // a peer asking for cached chunks only gets whole ones
  // The second half is not there: a short wait fails for want of progress.
  EXPECT_EQ((*c)->WaitFor(kChunk / 2, 1, std::chrono::milliseconds(50)).code(),
            StatusCode::kUnavailable);
  release.store(true);
  ASSERT_TRUE((*c)->WaitFor(0, kChunk, std::chrono::seconds(5)).ok());
  EXPECT_EQ((*c)->bytes()[kChunk - 1], std::byte{0x22});
}

TEST(ChunkCacheTest, AFailedFillReachesEveryWaiterAndIsRetriedLater) {
  ChunkCache cache(16 * kChunk, [](uint32_t) { return true; });
  std::atomic<int> calls{0};
  auto failing = [&](uint32_t, CachedChunk&) {
    calls.fetch_add(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return Status::IOError("store says no");
  };
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  threads.reserve(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      auto c = cache.Get(1, kChunk, failing);
      if (c && (*c)->WaitFor(0, kChunk, std::chrono::seconds(5)).IsUnavailable()) {
        errors.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 4);
  EXPECT_EQ(calls.load(), 1);
  while (cache.stats().fills_running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(cache.stats().live_bytes, 0u);  // the failed fill's memory is gone
  EXPECT_EQ(cache.stats().fetch_failures, 1u);
  CountingFiller good;
  ASSERT_TRUE(GetWhole(cache, 1, kChunk, good.Get()).has_value());
  EXPECT_EQ(good.fills.load(), 1);
}

TEST(ChunkCacheTest, NeverHoldsMoreThanItsCapacity) {
  ChunkCache cache(5 * kChunk, [](uint32_t) { return true; });
  CountingFiller filler;
  for (uint32_t i = 0; i < 50; ++i) {
    auto c = GetWhole(cache, i % 17, kChunk, filler.Get());
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ((*c)->bytes()[0], std::byte(i % 17));
  }
  const auto s = cache.stats();
  EXPECT_LE(s.peak_live_bytes, 5 * kChunk);
  EXPECT_GT(s.evictions, 0u);
  EXPECT_EQ(GetWhole(cache, 99, 6 * kChunk, filler.Get()).error().code(),
            StatusCode::kResourceExhausted);
}

TEST(ChunkCacheTest, HeldChunksAreNotEvicted) {
  ChunkCache cache(2 * kChunk, [](uint32_t) { return true; }, std::chrono::milliseconds(100));
  CountingFiller filler;
  auto a = GetWhole(cache, 1, kChunk, filler.Get());
  auto b = GetWhole(cache, 2, kChunk, filler.Get());
  ASSERT_TRUE(a && b);
  // Both held: no room, and the wait ends with a clear error rather than an overrun.
  auto c = GetWhole(cache, 3, kChunk, filler.Get());
  ASSERT_FALSE(c.has_value());
  EXPECT_EQ(c.error().code(), StatusCode::kResourceExhausted);
  // A peer's Get does not wait at all (the peer reads the store instead): with an hour's
  // wait_for_room, it is refused at once (a wait would hang the test).
  ChunkCache patient(2 * kChunk, [](uint32_t) { return true; }, std::chrono::hours(1));
  auto held1 = GetWhole(patient, 1, kChunk, filler.Get());
  auto held2 = GetWhole(patient, 2, kChunk, filler.Get());
  ASSERT_TRUE(held1 && held2);
  auto peer = patient.Get(3, kChunk, filler.Get(), /*wait=*/false);
  ASSERT_FALSE(peer.has_value());
  EXPECT_EQ(peer.error().code(), StatusCode::kResourceExhausted);
  a->reset();
  EXPECT_TRUE(GetWhole(cache, 3, kChunk, filler.Get()).has_value());
  EXPECT_EQ((*b)->bytes()[0], std::byte{2});
}

// A cyclic scan of 10 chunks through room for 4: LRU would miss every time. The plan-driven
// policy keeps a stable set, so every later pass hits at least 3 of the 10.
TEST(ChunkCacheTest, ACyclicScanLargerThanTheCacheDoesNotThrash) {
  ChunkCache cache(4 * kChunk, [](uint32_t) { return true; });
  CountingFiller filler;
  const uint64_t plan = cache.AddPlan();
  std::vector<uint32_t> order(10);
  for (uint32_t i = 0; i < 10; ++i) order[i] = i;
  std::vector<int> fills_per_pass;
  for (int pass = 0; pass < 4; ++pass) {
    cache.SetPlan(plan, Sequential(order));
    const int before = filler.fills.load();
    for (uint32_t c : order) {
      cache.NoteUse(c);
      ASSERT_TRUE(GetWhole(cache, c, kChunk, filler.Get()).has_value());
    }
    fills_per_pass.push_back(filler.fills.load() - before);
  }
  EXPECT_EQ(fills_per_pass[0], 10);
  for (int pass = 1; pass < 4; ++pass) EXPECT_LE(fills_per_pass[pass], 7) << "pass " << pass;
}

// With a plan, the victim is the chunk needed furthest in the future (Belady), and chunks no
// plan needs go before any that a plan still needs.
TEST(ChunkCacheTest, EvictsTheChunkNeededFurthestInTheFuture) {
  ChunkCache cache(3 * kChunk, [](uint32_t) { return true; });
  CountingFiller filler;
  const uint64_t plan = cache.AddPlan();
  cache.SetPlan(plan, Sequential({0, 1, 2, 3}));
  for (uint32_t c : {2u, 1u, 3u}) ASSERT_TRUE(GetWhole(cache, c, kChunk, filler.Get()).has_value());
  // Chunk 0 is needed first; the furthest (3) must make room for it.
  cache.NoteUse(0);
  ASSERT_TRUE(GetWhole(cache, 0, kChunk, filler.Get()).has_value());
  EXPECT_TRUE(cache.Contains(1));
  EXPECT_TRUE(cache.Contains(2));
  EXPECT_FALSE(cache.Contains(3));
  // Now 2 goes for 9 (furthest). Once the trainer is at 1, neither 0 (done) nor 9 (in no plan)
  // is needed again; of such own chunks the most recently used goes first: 9, not 0.
  ASSERT_TRUE(GetWhole(cache, 9, kChunk, filler.Get()).has_value());
  cache.NoteUse(1);
  ASSERT_TRUE(GetWhole(cache, 3, kChunk, filler.Get()).has_value());
  EXPECT_FALSE(cache.Contains(9));
}

TEST(ChunkCacheTest, PrefetchNeverEvictsWhatIsNeededSooner) {
  ChunkCache cache(2 * kChunk, [](uint32_t) { return true; });
  CountingFiller filler;
  const uint64_t plan = cache.AddPlan();
  cache.SetPlan(plan, Sequential({0, 1, 2, 3}));
  ASSERT_TRUE(GetWhole(cache, 0, kChunk, filler.Get()).has_value());
  ASSERT_TRUE(GetWhole(cache, 1, kChunk, filler.Get()).has_value());
  EXPECT_EQ(cache.PrefetchCandidates(3), (std::vector<uint32_t>{2}));
  auto p = cache.Prefetch(2, kChunk, filler.Get());
  EXPECT_FALSE(p.has_value());  // 0 and 1 are both needed before 2
  EXPECT_TRUE(cache.Contains(0) && cache.Contains(1));
  cache.NoteUse(1);  // the trainer moved on: 0 is done now
  EXPECT_TRUE(cache.Prefetch(2, kChunk, filler.Get()).has_value());
  EXPECT_FALSE(cache.Contains(0));
  cache.RemovePlan(plan);
  EXPECT_TRUE(cache.PrefetchCandidates(3).empty());
}

// A trainer reads a window of chunks at once: chunk 0 is still being read after chunks 1 and 2
// were first read (in use until entry 2), so it must outlive chunk 1, which is done.
TEST(ChunkCacheTest, ChunksStillBeingReadAreNotDone) {
  ChunkCache cache(2 * kChunk, [](uint32_t) { return true; });
  CountingFiller filler;
  const uint64_t plan = cache.AddPlan();
  cache.SetPlan(plan, {{0, 0, 2}, {1, 1, 1}, {2, 2, 2}});
  cache.NoteUse(0);
  ASSERT_TRUE(GetWhole(cache, 0, kChunk, filler.Get()).has_value());
  cache.NoteUse(1);
  ASSERT_TRUE(GetWhole(cache, 1, kChunk, filler.Get()).has_value());
  cache.NoteUse(2);
  ASSERT_TRUE(GetWhole(cache, 2, kChunk, filler.Get()).has_value());
  EXPECT_TRUE(cache.Contains(0));
  EXPECT_FALSE(cache.Contains(1));
}

TEST(ChunkCacheTest, CopiesOfOthersChunksGoBeforeOwnChunks) {
  // Even chunks are owned here.
  ChunkCache cache(3 * kChunk, [](uint32_t c) { return c % 2 == 0; });
  CountingFiller filler;
  for (uint32_t c : {0u, 1u, 2u}) ASSERT_TRUE(GetWhole(cache, c, kChunk, filler.Get()).has_value());
  ASSERT_TRUE(GetWhole(cache, 4, kChunk, filler.Get()).has_value());
  EXPECT_FALSE(cache.Contains(1));
  EXPECT_TRUE(cache.Contains(0) && cache.Contains(2) && cache.Contains(4));
}

}  // namespace
}  // namespace stoker::node
