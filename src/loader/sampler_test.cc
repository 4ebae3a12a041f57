#include "loader/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "common/random.h"

namespace stoker::loader {
namespace {

// n samples in chunks of varying size (like packing files of varying size into fixed-size chunks).
std::vector<uint32_t> ChunkLayout(uint32_t n, uint32_t seed) {
  Pcg32 rng(seed);
  std::vector<uint32_t> chunks(n);
  uint32_t chunk = 0, left = 1 + static_cast<uint32_t>(rng.Below(40));
  for (uint32_t s = 0; s < n; ++s) {
    if (left == 0) {
      ++chunk;
      left = 1 + static_cast<uint32_t>(rng.Below(40));
    }
    chunks[s] = chunk;
    --left;
  }
  return chunks;
}

Sampler Make(uint32_t n, ShuffleMode mode, uint64_t seed, uint32_t window = 4,
             bool drop_last = false, uint64_t version = 1) {
  SamplerOptions o;
  o.mode = mode;
  o.seed = seed;
  o.window_chunks = window;
  o.drop_last = drop_last;
  auto s = Sampler::Create(ChunkLayout(n, static_cast<uint32_t>(seed) + 7), version, o);
  EXPECT_TRUE(s.has_value());
  return std::move(*s);
}

constexpr ShuffleMode kModes[] = {ShuffleMode::kSequential, ShuffleMode::kFull,
                                  ShuffleMode::kChunk};

TEST(SamplerTest, GlobalOrderIsAPermutation) {
  for (ShuffleMode mode : kModes) {
    for (uint32_t n : {0u, 1u, 2u, 17u, 1000u}) {
      for (uint32_t ranks : {1u, 2u, 3u, 8u}) {
        const Sampler s = Make(n, mode, 42);
        auto order = s.GlobalOrder(3, ranks).value();
        std::sort(order.begin(), order.end());
        std::vector<uint32_t> all(n);
        std::iota(all.begin(), all.end(), 0u);
        EXPECT_EQ(order, all) << ShuffleModeName(mode) << " n=" << n << " R=" << ranks;
      }
    }
  }
}

TEST(SamplerTest, RanksAreDisjointEqualAndCoverEverything) {
  for (ShuffleMode mode : kModes) {
    for (uint64_t seed = 0; seed < 20; ++seed) {
      for (uint32_t ranks : {1u, 2u, 3u, 4u, 7u}) {
        for (bool drop_last : {false, true}) {
          const uint32_t n = 50 + static_cast<uint32_t>(seed) * 37;
          const Sampler s = Make(n, mode, seed, 3, drop_last);
          std::map<uint32_t, int> seen;
          size_t per_rank = SIZE_MAX;
          uint64_t padded = 0, dropped = 0;
          for (uint32_t r = 0; r < ranks; ++r) {
            const auto plan = s.PlanRank({seed, 0, ranks}, ranks, r).value();
            if (per_rank == SIZE_MAX) per_rank = plan.samples.size();
            EXPECT_EQ(plan.samples.size(), per_rank) << "every rank yields the same count";
            for (size_t i = 0; i + plan.padded < plan.samples.size(); ++i) ++seen[plan.samples[i]];
            padded += plan.padded;
            dropped = plan.dropped;
          }
          EXPECT_EQ(per_rank, drop_last ? n / ranks : (n + ranks - 1) / ranks);
          EXPECT_EQ(padded, drop_last ? 0 : per_rank * ranks - n);
          EXPECT_EQ(seen.size() + dropped, n) << "covered once, apart from documented drops";
          for (const auto& [sample, count] : seen) EXPECT_EQ(count, 1) << sample;
        }
      }
    }
  }
}

TEST(SamplerTest, DeterministicAndDependsOnSeedEpochAndVersion) {
  for (ShuffleMode mode : {ShuffleMode::kFull, ShuffleMode::kChunk}) {
    const Sampler a = Make(500, mode, 5), b = Make(500, mode, 5);
    EXPECT_EQ(a.GlobalOrder(2, 1).value(), b.GlobalOrder(2, 1).value());
    EXPECT_NE(a.GlobalOrder(2, 1).value(), a.GlobalOrder(3, 1).value()) << "new epoch, new order";
    EXPECT_NE(a.GlobalOrder(2, 1).value(), Make(500, mode, 6).GlobalOrder(2, 1).value()) << "seed";
    EXPECT_NE(a.GlobalOrder(2, 1).value(),
              Make(500, mode, 5, 4, false, 2).GlobalOrder(2, 1).value())
        << "version";
  }
  const Sampler seq = Make(10, ShuffleMode::kSequential, 1);
  EXPECT_EQ(seq.GlobalOrder(9, 1).value(), (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

// Golden values: the exact orders are part of stoker's contract (resume across versions of
// stoker, reproducible experiments). Changing them is a breaking change.
TEST(SamplerTest, GoldenOrders) {
  SamplerOptions o;
  o.seed = 1234;
  o.mode = ShuffleMode::kFull;
  auto full = Sampler::Create(std::vector<uint32_t>(12, 0), 1, o);
  ASSERT_TRUE(full.has_value());
  EXPECT_EQ(full->GlobalOrder(0, 1).value(),
            (std::vector<uint32_t>{8, 5, 9, 11, 6, 4, 3, 7, 2, 10, 0, 1}));
  o.mode = ShuffleMode::kChunk;
  o.window_chunks = 2;
  // 12 samples in 4 chunks of 3.
  auto chunk = Sampler::Create(std::vector<uint32_t>{0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3}, 1, o);
  ASSERT_TRUE(chunk.has_value());
  EXPECT_EQ(chunk->GlobalOrder(0, 1).value(),
            (std::vector<uint32_t>{5, 4, 0, 1, 2, 3, 10, 6, 7, 11, 9, 8}));
  EXPECT_EQ(chunk->GlobalOrder(0, 2).value(),
            (std::vector<uint32_t>{5, 10, 4, 0, 6, 1, 7, 11, 8, 9, 3, 2}));
  EXPECT_EQ(EpochSeed(1, 2, 3, 4), 0xd55ccd4aeb3ccafbull);
}

// The full-mode order follows from the specification alone (docs/sampler.md): Pcg32 seeded
// with EpochSeed(seed, epoch, version, 2), Durstenfeld's Fisher-Yates from the back.
TEST(SamplerTest, FullOrderMatchesTheSpecification) {
  const Sampler s = Make(300, ShuffleMode::kFull, 77, 4, false, 9);
  std::vector<uint32_t> expected(300);
  std::iota(expected.begin(), expected.end(), 0u);
  Pcg32 rng(EpochSeed(77, 4, 9, 2));
  for (size_t i = expected.size(); i > 1; --i) std::swap(expected[i - 1], expected[rng.Below(i)]);
  EXPECT_EQ(s.GlobalOrder(4, 1).value(), expected);
}

TEST(SamplerTest, ChunkModeKeepsWindowsTogether) {
  const uint32_t window = 3;
  SamplerOptions o;
  o.mode = ShuffleMode::kChunk;
  o.window_chunks = window;
  o.seed = 3;
  const auto layout = ChunkLayout(2000, 11);
  auto s = Sampler::Create(layout, 1, o);
  ASSERT_TRUE(s.has_value());
  const auto order = s->GlobalOrder(0, 1).value();
  // Walk the order: the set of chunks touched changes only at window boundaries, and each
  // window touches at most W chunks, each chunk in exactly one window.
  std::set<uint32_t> current, finished;
  size_t in_window = 0, window_size = 0;
  std::map<uint32_t, size_t> chunk_size;
  for (uint32_t c : layout) ++chunk_size[c];
  for (uint32_t sample : order) {
    const uint32_t c = layout[sample];
    if (!current.contains(c)) {
      if (current.size() == window && in_window == window_size) {
        finished.insert(current.begin(), current.end());
        current.clear();
        in_window = window_size = 0;
      }
      ASSERT_FALSE(finished.contains(c)) << "a chunk appears in two windows";
      current.insert(c);
      window_size += chunk_size[c];
    }
    ++in_window;
    ASSERT_LE(current.size(), window);
  }
  // And the order is not storage order.
  EXPECT_FALSE(std::is_sorted(order.begin(), order.end()));
}

TEST(SamplerTest, ChunkModeGivesEachRankItsOwnChunks) {
  for (uint32_t ranks : {2u, 3u, 4u}) {
    SamplerOptions o;
    o.mode = ShuffleMode::kChunk;
    o.window_chunks = 2;
    const auto layout = ChunkLayout(5000, 21);
    auto s = Sampler::Create(layout, 1, o);
    ASSERT_TRUE(s.has_value());
    std::map<uint32_t, std::set<uint32_t>> readers;  // chunk -> ranks reading from it
    for (uint32_t r = 0; r < ranks; ++r) {
      const Sampler::RankPlan plan = s->PlanRank({0, 0, ranks}, ranks, r).value();
      for (uint32_t sample : plan.samples) {
        readers[layout[sample]].insert(r);
      }
    }
    size_t shared = 0;
    for (const auto& [chunk, rs] : readers) shared += rs.size() > 1;
    // Only chunks of the last windows, whose samples balanced the streams, have several readers.
    EXPECT_LE(shared, ranks * o.window_chunks) << "R=" << ranks;
    EXPECT_GT(readers.size(), 20 * shared) << "R=" << ranks;
  }
}

// Resume: consume k samples per rank with R ranks, save the state, continue with R' ranks:
// every sample is read exactly once over the epoch.
TEST(SamplerTest, ElasticResumeNeitherLosesNorRepeats) {
  Pcg32 rng(99);
  for (ShuffleMode mode : kModes) {
    for (int trial = 0; trial < 60; ++trial) {
      const uint32_t n = 20 + static_cast<uint32_t>(rng.Below(600));
      const uint32_t r1 = 1 + static_cast<uint32_t>(rng.Below(6));
      const uint32_t r2 = 1 + static_cast<uint32_t>(rng.Below(6));
      const Sampler s = Make(n, mode, trial, 1 + static_cast<uint32_t>(rng.Below(5)));
      const SamplerState start{static_cast<uint64_t>(trial), 0, r1};
      const uint64_t k = rng.Below(n / r1 + 1);  // a cut before any padding is read
      std::map<uint32_t, int> seen;
      for (uint32_t r = 0; r < r1; ++r) {
        const auto plan = s.PlanRank(start, r1, r).value();
        for (uint64_t i = 0; i < k; ++i) ++seen[plan.samples[i]];
      }
      SamplerState saved = start;  // every rank of r1 has read k samples
      saved.position += k * r1;
      for (uint32_t r = 0; r < r2; ++r) {
        const auto plan = s.PlanRank(saved, r2, r).value();
        for (size_t i = 0; i + plan.padded < plan.samples.size(); ++i) ++seen[plan.samples[i]];
      }
      ASSERT_EQ(seen.size(), n) << ShuffleModeName(mode) << " n=" << n << " R " << r1 << "->" << r2
                                << " k=" << k;
      for (const auto& [sample, count] : seen) ASSERT_EQ(count, 1);
    }
  }
}

TEST(SamplerTest, SequentialIsStorageOrderChunkAfterChunk) {
  // Files placed in chunks in a mixed order: index order would hop between chunks.
  SamplerOptions o;
  o.mode = ShuffleMode::kSequential;
  auto s = Sampler::Create(std::vector<uint32_t>{2, 0, 1, 0, 2, 1}, 1, o);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->GlobalOrder(0, 1).value(), (std::vector<uint32_t>{1, 3, 2, 5, 0, 4}));
  EXPECT_EQ(s->GlobalOrder(5, 3).value(),
            s->GlobalOrder(0, 1).value());  // no randomness, any world size
  // In path order (chunks ascending with the index) it is 0, 1, ..., N-1.
  auto path = Sampler::Create(ChunkLayout(500, 3), 1, o);
  std::vector<uint32_t> identity(500);
  std::iota(identity.begin(), identity.end(), 0u);
  EXPECT_EQ(path->GlobalOrder(0, 1).value(), identity);
}

// The chunk-mode order as first written (before ChunkStreams): the whole order G built sample by
// sample. The reference the streamed construction must match.
std::vector<uint32_t> ReferenceChunkOrder(const std::vector<uint32_t>& sample_chunks,
                                          const SamplerOptions& o, uint64_t epoch, uint64_t version,
                                          uint32_t ranks) {
  const auto n = static_cast<uint32_t>(sample_chunks.size());
  const uint32_t max_chunk = *std::max_element(sample_chunks.begin(), sample_chunks.end());
  const SampleGroups groups = GroupByUnit(sample_chunks, max_chunk + 1);
  std::vector<uint32_t> chunks(sample_chunks);
  std::sort(chunks.begin(), chunks.end());
  chunks.erase(std::unique(chunks.begin(), chunks.end()), chunks.end());
  Pcg32 chunk_rng(EpochSeed(o.seed, epoch, version, 1));
  Shuffle(std::span<uint32_t>(chunks), chunk_rng);
  Pcg32 rng(EpochSeed(o.seed, epoch, version, 2));
  std::vector<std::vector<uint32_t>> rank_chunks(ranks), streams(ranks);
  std::vector<uint64_t> load(ranks, 0);
  for (uint32_t c : chunks) {
    const auto r = static_cast<uint32_t>(std::min_element(load.begin(), load.end()) - load.begin());
    rank_chunks[r].push_back(c);
    load[r] += groups.begin[c + 1] - groups.begin[c];
  }
  for (uint32_t r = 0; r < ranks; ++r) {
    std::vector<uint32_t>& out = streams[r];
    for (size_t w = 0; w < rank_chunks[r].size(); w += o.window_chunks) {
      const size_t start = out.size();
      for (size_t c = w; c < std::min(rank_chunks[r].size(), w + o.window_chunks); ++c) {
        const uint32_t chunk = rank_chunks[r][c];
        out.insert(out.end(), groups.members.begin() + groups.begin[chunk],
                   groups.members.begin() + groups.begin[chunk + 1]);
      }
      Shuffle(std::span<uint32_t>(out.data() + start, out.size() - start), rng);
    }
  }
  std::vector<uint32_t> surplus;
  std::vector<size_t> want(ranks);
  for (uint32_t r = 0; r < ranks; ++r) {
    want[r] = n / ranks + (r < n % ranks ? 1 : 0);
    while (streams[r].size() > want[r]) {
      surplus.push_back(streams[r].back());
      streams[r].pop_back();
    }
  }
  for (uint32_t r = 0; r < ranks; ++r) {
    while (streams[r].size() < want[r]) {
      streams[r].push_back(surplus.back());
      surplus.pop_back();
    }
  }
  std::vector<uint32_t> order(n);
  for (uint32_t r = 0; r < ranks; ++r) {
    for (size_t i = 0; i < streams[r].size(); ++i) order[i * ranks + r] = streams[r][i];
  }
  return order;
}

// Units in memory, recording which units' members were asked for.
class RecordingUnits final : public UnitSource {
 public:
  explicit RecordingUnits(const std::vector<uint32_t>& sample_units)
      : inner_(UnitsInMemory(sample_units)) {}
  std::span<const uint32_t> counts() const override { return inner_->counts(); }
  Status Prepare(std::span<const uint32_t> units) const override {
    prepared.insert(units.begin(), units.end());
    return Status::OK();
  }
  Result<std::vector<uint32_t>> Members(uint32_t unit) const override {
    EXPECT_TRUE(prepared.count(unit)) << "unit " << unit << " asked for before Prepare";
    asked.insert(unit);
    return inner_->Members(unit);
  }
  mutable std::set<uint32_t> prepared, asked;

 private:
  std::shared_ptr<const UnitSource> inner_;
};

// Layouts with empty and tiny chunks, more ranks than chunks, every resume point at a round's
// start, drop_last or padding: a rank's plan built from its own windows is exactly its share of
// the order as first defined.
TEST(SamplerTest, ChunkModeRankPlanIsItsShareOfTheReferenceOrder) {
  Pcg32 rng(2024);
  for (int trial = 0; trial < 300; ++trial) {
    const uint32_t n = 1 + static_cast<uint32_t>(rng.Below(400));
    std::vector<uint32_t> layout = ChunkLayout(n, static_cast<uint32_t>(trial));
    if (trial % 3 == 0) {  // unit ids with gaps: chunks that hold no sample
      for (uint32_t& c : layout) c *= 2;
    }
    SamplerOptions o;
    o.mode = ShuffleMode::kChunk;
    o.seed = static_cast<uint64_t>(trial);
    o.window_chunks = 1 + static_cast<uint32_t>(rng.Below(5));
    o.drop_last = trial % 2 == 1;
    const uint32_t ranks = 1 + static_cast<uint32_t>(rng.Below(trial % 5 == 0 ? 40 : 8));
    const uint64_t epoch = rng.Below(3);
    const auto reference = ReferenceChunkOrder(layout, o, epoch, 3, ranks);
    auto s = Sampler::Create(layout, 3, o);
    ASSERT_TRUE(s.has_value());
    ASSERT_EQ(s->GlobalOrder(epoch, ranks).value(), reference) << "trial " << trial;
    const uint64_t rounds = n / ranks + 1;
    const uint64_t position = rng.Below(rounds + 1) * ranks;
    for (uint32_t r = 0; r < ranks; ++r) {
      const Sampler::RankPlan plan = s->PlanRank({epoch, position, ranks}, ranks, r).value();
      const uint64_t start = std::min<uint64_t>(position, n), remaining = n - start;
      const uint64_t per_rank = o.drop_last ? remaining / ranks : (remaining + ranks - 1) / ranks;
      ASSERT_EQ(plan.samples.size(), per_rank);
      uint64_t padded = 0;
      for (uint64_t i = 0; i < per_rank; ++i) {
        const uint64_t q = start + i * ranks + r;
        padded += q >= n;
        ASSERT_EQ(plan.samples[i], reference[q < n ? q : (q - n) % n])
            << "trial " << trial << " rank " << r << " of " << ranks << " i=" << i;
      }
      EXPECT_EQ(plan.padded, padded);
    }
  }
}

// One rank of 16 asks for the members of its own chunks and of a few windows that even the
// streams out: not of every chunk.
TEST(SamplerTest, ChunkModeRankReadsOnlyTheUnitsOfItsShare) {
  const std::vector<uint32_t> layout = ChunkLayout(50000, 5);
  const uint32_t chunks = layout.back() + 1;
  SamplerOptions o;
  o.mode = ShuffleMode::kChunk;
  o.window_chunks = 4;
  auto units = std::make_shared<RecordingUnits>(layout);
  auto s = Sampler::Create(units, 1, o);
  ASSERT_TRUE(s.has_value());
  const Sampler::RankPlan plan = s->PlanRank({0, 0, 16}, 16, 3).value();
  std::set<uint32_t> own;
  for (uint32_t sample : plan.samples) own.insert(layout[sample]);
  EXPECT_LE(units->asked.size(), own.size() + 3 * o.window_chunks);
  EXPECT_LT(units->asked.size(), chunks / 8) << "of " << chunks << " chunks";
  for (uint32_t c : own) EXPECT_TRUE(units->asked.count(c));
}

TEST(SamplerTest, RejectsBadOptions) {
  SamplerOptions o;
  o.mode = ShuffleMode::kChunk;
  o.window_chunks = 0;
  EXPECT_FALSE(Sampler::Create(std::vector<uint32_t>{0, 0}, 1, o).has_value());
  EXPECT_FALSE(ParseShuffleMode("random").has_value());
  EXPECT_EQ(*ParseShuffleMode("chunk"), ShuffleMode::kChunk);
}

}  // namespace
}  // namespace stoker::loader
