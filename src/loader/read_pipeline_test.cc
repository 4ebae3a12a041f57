#include "loader/read_pipeline.h"

#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <thread>

#include "dataset/packer.h"
#include "dataset/version_view.h"
#include "loader/sampler.h"
#include "storage/fault_storage.h"
#include "storage/memory_storage.h"
#include "storage/posix_storage.h"
#include "testing/test_util.h"

namespace stoker::loader {
namespace {

struct Packed {
  test::Tree tree;
  std::shared_ptr<Storage> storage;
  std::shared_ptr<const Dataset> dataset;
};

Packed PackRandom(uint64_t seed, const std::shared_ptr<Storage>& storage,
                  uint64_t chunk_bytes = 64 << 10) {
  test::RandomTreeOptions o;
  o.files = 200;
  Packed p{test::RandomTree(seed, o), storage, nullptr};
  dataset::PackOptions po;
  po.chunk_bytes = chunk_bytes;
  auto source = test::TreeSource(p.tree);
  EXPECT_TRUE(dataset::Pack(*source, *storage, po).has_value());
  auto ds = Dataset::Open(storage);
  EXPECT_TRUE(ds.has_value());
  p.dataset = std::shared_ptr<const Dataset>(std::move(*ds));
  return p;
}

std::vector<uint32_t> Plan(const Dataset& ds, ShuffleMode mode, uint64_t seed) {
  std::vector<uint32_t> chunks;
  chunks.reserve(ds.sample_count());
  for (uint32_t s = 0; s < ds.sample_count(); ++s) {
    chunks.push_back(dataset::ViewOf(ds).file(ds.SampleFiles(s).value().first).chunk);
  }
  SamplerOptions o;
  o.mode = mode;
  o.seed = seed;
  o.window_chunks = 4;
  return Sampler::Create(chunks, ds.version(), o)->GlobalOrder(0, 1).value();
}

class ReadPipelineTest : public ::testing::TestWithParam<IoEngineKind> {};

// Every sample arrives once, in plan order, with exactly its bytes — for every mode, several
// budgets (down to smaller than one segment's worth) and both I/O engines.
TEST_P(ReadPipelineTest, DeliversEverySampleInOrderWithItsBytes) {
  test::TempDir dir;
  Packed p = PackRandom(1, storage::NewPosixStorage(dir.path()));
  for (ShuffleMode mode : {ShuffleMode::kSequential, ShuffleMode::kFull, ShuffleMode::kChunk}) {
    for (uint64_t budget : {uint64_t{1} << 30, uint64_t{256} << 10, uint64_t{1}}) {
      const auto plan = Plan(*p.dataset, mode, 7);
      ReadPipelineOptions o;
      o.memory_budget_bytes = budget;
      o.engine = GetParam();
      auto pipeline = ReadPipeline::Start(p.dataset, plan, o);
      ASSERT_TRUE(pipeline.has_value()) << pipeline.error().ToString();
      for (uint64_t i = 0; i < plan.size(); ++i) {
        auto item = (*pipeline)->Next();
        ASSERT_TRUE(item.has_value()) << item.error().ToString();
        ASSERT_TRUE(item->has_value());
        const SampleData& s = **item;
        ASSERT_TRUE(s.status.ok()) << s.status.ToString();
        EXPECT_EQ(s.position, i);
        EXPECT_EQ(s.sample, plan[i]);
        ASSERT_EQ(s.files.size(), 1u);
        const std::string path = p.dataset->FilePath(s.files[0].index);
        EXPECT_EQ(std::string_view(reinterpret_cast<const char*>(s.files[0].bytes.data()),
                                   s.files[0].bytes.size()),
                  p.tree.files.at(path))
            << path;
      }
      auto end = (*pipeline)->Next();
      ASSERT_TRUE(end.has_value());
      EXPECT_FALSE(end->has_value());
      const auto stats = (*pipeline)->stats();
      EXPECT_EQ(stats.samples, plan.size());
      EXPECT_EQ(stats.payload_bytes, p.tree.TotalBytes());
      if (budget > 1) {
        EXPECT_LE(stats.peak_bytes_held, budget);
      }
    }
  }
}

// Gated (the image pipeline with feeders): only positions admitted to be read are read and
// delivered, in plan order, while Admit decides the plan slice by slice from another thread.
TEST_P(ReadPipelineTest, AGatedPlanReadsOnlyTheAdmittedPositions) {
  test::TempDir dir;
  Packed p = PackRandom(2, storage::NewPosixStorage(dir.path()));
  const auto plan = Plan(*p.dataset, ShuffleMode::kChunk, 3);
  ReadPipelineOptions o;
  o.memory_budget_bytes = 256 << 10;
  o.engine = GetParam();
  o.gated = true;
  auto pipeline = ReadPipeline::Start(p.dataset, plan, o);
  ASSERT_TRUE(pipeline.has_value()) << pipeline.error().ToString();
  // Slices of 1..7 positions; every third skipped.
  std::vector<uint64_t> expected;
  uint64_t skipped_bytes = 0;
  std::thread admit([&] {
    uint64_t first = 0;
    for (int k = 0; first < plan.size(); ++k) {
      const uint64_t end = std::min<uint64_t>(plan.size(), first + 1 + k % 7);
      const bool read = k % 3 != 2;
      for (uint64_t q = first; q < end; ++q) {
        if (read) expected.push_back(q);
        if (!read) skipped_bytes += p.dataset->Stat(p.dataset->SampleFiles(plan[q])->first)->size;
      }
      EXPECT_TRUE((*pipeline)->Admit(first, end, read).ok());
      first = end;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  std::vector<uint64_t> delivered;
  for (;;) {
    auto item = (*pipeline)->Next();
    ASSERT_TRUE(item.has_value()) << item.error().ToString();
    if (!item->has_value()) break;
    const SampleData& s = **item;
    ASSERT_TRUE(s.status.ok()) << s.status.ToString();
    EXPECT_EQ(s.sample, plan[s.position]);
    delivered.push_back(s.position);
  }
  admit.join();
  EXPECT_EQ(delivered, expected);
  const ReadPipelineStats stats = (*pipeline)->stats();
  uint64_t total = 0;
  for (uint32_t s : plan) total += p.dataset->Stat(p.dataset->SampleFiles(s)->first)->size;
  EXPECT_EQ(stats.payload_bytes, total - skipped_bytes);
  // Out of order, or on a pipeline that is not gated: refused.
  EXPECT_FALSE((*pipeline)->Admit(0, 1, true).ok());
  o.gated = false;
  auto ungated = ReadPipeline::Start(p.dataset, plan, o);
  ASSERT_TRUE(ungated.has_value());
  EXPECT_FALSE((*ungated)->Admit(0, 1, true).ok());
}

INSTANTIATE_TEST_SUITE_P(Engines, ReadPipelineTest,
                         ::testing::Values(IoEngineKind::kThreads, IoEngineKind::kAuto));

TEST(ReadPipelineCoalescing, ChunkModeReadsLargeRanges) {
  auto storage = std::make_shared<storage::MemoryStorage>();
  Packed p = PackRandom(2, storage, 1 << 20);
  ReadPipelineOptions o;
  o.memory_budget_bytes = 64 << 20;
  auto sequential = ReadPipeline::Start(p.dataset, Plan(*p.dataset, ShuffleMode::kChunk, 1), o);
  auto full = ReadPipeline::Start(p.dataset, Plan(*p.dataset, ShuffleMode::kFull, 1), o);
  o.max_gap_bytes = 0;
  o.segment_bytes = 1;  // one sample per segment: no coalescing possible
  auto single = ReadPipeline::Start(p.dataset, Plan(*p.dataset, ShuffleMode::kFull, 1), o);
  for (auto* pl : {&sequential, &full, &single}) {
    ASSERT_TRUE(pl->has_value());
    while (true) {
      auto item = (**pl)->Next();
      ASSERT_TRUE(item.has_value());
      if (!item->has_value()) break;
    }
  }
  // A window's whole chunks fit in a segment: a handful of reads. One per file without segments.
  EXPECT_LE((*sequential)->stats().ranges, dataset::ViewOf(*p.dataset).chunk_count() * 2);
  // (An empty file shares its offset with a neighbour, so it may ride along in its range.)
  size_t empty = 0;
  for (const auto& [path, bytes] : p.tree.files) empty += bytes.empty();
  EXPECT_GE((*single)->stats().ranges, p.dataset->file_count() - empty);
  EXPECT_GT((*single)->stats().ranges, 10 * (*sequential)->stats().ranges);
}

TEST(ReadPipelineFaults, CorruptBytesBecomeSampleErrorsNamingTheFile) {
  auto memory = std::make_shared<storage::MemoryStorage>();
  Packed clean = PackRandom(3, memory);
  storage::FaultOptions fo;
  fo.path_filter = "chunks/";
  fo.bit_flip_probability = 0.3;
  fo.read_error_probability = 0.1;
  fo.seed = 5;
  auto faulty = std::make_shared<storage::FaultStorage>(memory, fo);
  auto ds = Dataset::Open(faulty);
  ASSERT_TRUE(ds.has_value());
  std::shared_ptr<const Dataset> dataset(std::move(*ds));
  ReadPipelineOptions o;
  o.max_range_bytes = 32 << 10;
  const auto plan = Plan(*dataset, ShuffleMode::kFull, 3);
  auto pipeline = ReadPipeline::Start(dataset, plan, o);
  ASSERT_TRUE(pipeline.has_value());
  size_t good = 0, bad = 0;
  while (true) {
    auto item = (*pipeline)->Next();
    ASSERT_TRUE(item.has_value());
    if (!item->has_value()) break;
    const SampleData& s = **item;
    const std::string path = dataset->FilePath(dataset->SampleFiles(s.sample).value().first);
    if (s.status.ok()) {
      ++good;
      EXPECT_EQ(std::string_view(reinterpret_cast<const char*>(s.files[0].bytes.data()),
                                 s.files[0].bytes.size()),
                clean.tree.files.at(path))
          << "a sample delivered as good must carry exactly its bytes";
    } else {
      ++bad;
      EXPECT_NE(s.status.message().find(path), std::string::npos) << s.status.ToString();
    }
  }
  EXPECT_GT(good, 0u);
  EXPECT_GT(bad, 0u);
  EXPECT_GT(faulty->counters().bit_flips, 0u);
}

TEST(ReadPipelineBudget, HeldSamplesExhaustingTheBudgetIsAnErrorNotAHang) {
  auto storage = std::make_shared<storage::MemoryStorage>();
  Packed p = PackRandom(4, storage);
  ReadPipelineOptions o;
  o.memory_budget_bytes = 512 << 10;
  auto pipeline = ReadPipeline::Start(p.dataset, Plan(*p.dataset, ShuffleMode::kSequential, 0), o);
  ASSERT_TRUE(pipeline.has_value());
  std::vector<SampleData> held;  // a consumer that never lets go
  Status failure;
  for (size_t i = 0; i < p.dataset->sample_count(); ++i) {
    auto item = (*pipeline)->Next();
    if (!item.has_value()) {
      failure = item.error();
      break;
    }
    held.push_back(std::move(**item));
  }
  EXPECT_EQ(failure.code(), StatusCode::kResourceExhausted) << failure.ToString();
}

// Full mode over large chunks: a segment's samples lie scattered with small holes between them.
// Reading through those holes must not make the segment's reads outgrow the budget, or the
// scheduler waits for memory only this segment's delivery could free (a false "budget held by
// the consumer" error, though the consumer holds nothing).
TEST(ReadPipelineBudget, ReadingThroughHolesStaysWithinTheBudget) {
  auto storage = std::make_shared<storage::MemoryStorage>();
  Packed p = PackRandom(6, storage, 1 << 20);
  for (uint64_t budget : {uint64_t{128} << 10, uint64_t{512} << 10, uint64_t{2} << 20}) {
    ReadPipelineOptions o;
    o.memory_budget_bytes = budget;
    const auto plan = Plan(*p.dataset, ShuffleMode::kFull, 3);
    auto pipeline = ReadPipeline::Start(p.dataset, plan, o);
    ASSERT_TRUE(pipeline.has_value());
    for (size_t i = 0; i < plan.size(); ++i) {  // the consumer drops every sample at once
      auto item = (*pipeline)->Next();
      ASSERT_TRUE(item.has_value()) << "budget " << budget << ": " << item.error().ToString();
      ASSERT_TRUE(item->has_value());
    }
    // (A single sample larger than the budget is read alone: files here are up to 200 KiB.)
    EXPECT_LE((*pipeline)->stats().peak_bytes_held, std::max<uint64_t>(budget, 200 << 10));
  }
}

// Stopping early (e.g. a time-limited epoch) after the pipeline has read ahead: the samples read
// but never delivered give their buffers back during destruction (this used to self-deadlock).
TEST(ReadPipelineStop, DestroyingWithReadButUndeliveredSamplesIsClean) {
  auto storage = std::make_shared<storage::MemoryStorage>();
  Packed p = PackRandom(7, storage);
  uint64_t payload = 0;
  for (const auto& [path, bytes] : p.tree.files) payload += bytes.size();
  ReadPipelineOptions o;
  o.max_gap_bytes = 0;  // bytes_read then reaches exactly the payload once everything is read
  auto pipeline = ReadPipeline::Start(p.dataset, Plan(*p.dataset, ShuffleMode::kFull, 0), o);
  ASSERT_TRUE(pipeline.has_value());
  ASSERT_TRUE((*pipeline)->Next().has_value());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while ((*pipeline)->stats().bytes_read < payload && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ((*pipeline)->stats().bytes_read, payload);
  pipeline->reset();  // must return
}

TEST(ReadPipelineStop, DestroyingMidEpochIsClean) {
  auto storage = std::make_shared<storage::MemoryStorage>();
  Packed p = PackRandom(5, storage);
  for (int consumed : {0, 1, 50}) {
    auto pipeline = ReadPipeline::Start(p.dataset, Plan(*p.dataset, ShuffleMode::kFull, 0), {});
    ASSERT_TRUE(pipeline.has_value());
    std::optional<SampleData> kept;
    for (int i = 0; i < consumed; ++i) kept = std::move(*(*pipeline)->Next().value());
    pipeline->reset();  // the kept sample's bytes stay valid after the pipeline is gone
    if (kept) {
      const std::string path = p.dataset->FilePath(kept->files[0].index);
      EXPECT_EQ(std::string_view(reinterpret_cast<const char*>(kept->files[0].bytes.data()),
                                 kept->files[0].bytes.size()),
                p.tree.files.at(path));
    }
  }
}

}  // namespace
}  // namespace stoker::loader
