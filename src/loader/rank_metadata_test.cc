#include "loader/rank_metadata.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>

#include "dataset/packer.h"
#include "dataset/version_view.h"
#include "loader/read_pipeline.h"
#include "loader/shuffle_unit.h"
#include "storage/memory_storage.h"
#include "testing/test_util.h"

namespace stoker::loader {
namespace {

// An ImageFolder tree of 3000 small files in ~150 chunks, packed once in the default (mixed)
// order; opened twice per test: for lookups (as stoker.Dataset and a trainer open it) and with
// every location.
struct TwoOpenings {
  std::shared_ptr<Storage> storage;
  std::shared_ptr<const Dataset> lazy, full;
};

std::shared_ptr<Storage> PackOnce() {
  test::RandomTreeOptions o;
  o.files = 3000;
  o.image_folder = true;
  o.classes = 40;
  o.max_file_bytes = 2 << 10;
  test::TempDir src;
  test::WriteTree(test::RandomTree(17, o), src.path());
  dataset::DirectorySourceOptions source_options;
  dataset::PackOptions po;
  po.chunk_bytes = 8 << 10;
  dataset::SetStorageOrder(dataset::StorageOrder::kMixed, 1, &source_options, &po);
  auto source = dataset::OpenDirectorySource(src.path(), source_options);
  EXPECT_TRUE(source.has_value());
  auto storage = std::make_shared<storage::MemoryStorage>();
  EXPECT_TRUE(dataset::Pack(**source, *storage, po).has_value());
  return storage;
}

TwoOpenings OpenTwice(std::shared_ptr<Storage> packed) {
  TwoOpenings t{std::move(packed), nullptr, nullptr};
  DatasetOpenOptions lookups;
  lookups.read_locations = false;
  t.lazy = std::shared_ptr<const Dataset>(Dataset::Open(t.storage, lookups).value());
  t.full = std::shared_ptr<const Dataset>(Dataset::Open(t.storage).value());
  return t;
}

TwoOpenings Pack() {
  static const std::shared_ptr<Storage> packed = PackOnce();
  return OpenTwice(packed);
}

// Reads `plan` through the pipeline of the lazily opened dataset: every sample in order, with
// the label, files and bytes that the dataset opened with every location gives.
void ExpectThePipelineDelivers(const TwoOpenings& t, const std::vector<uint32_t>& plan,
                               std::set<uint32_t>* delivered) {
  auto pipe = ReadPipeline::Start(t.lazy, plan, {});
  ASSERT_TRUE(pipe.has_value()) << pipe.error().ToString();
  for (uint32_t expected : plan) {
    auto item = (*pipe)->Next();
    ASSERT_TRUE(item.has_value() && item->has_value());
    const SampleData& data = **item;
    ASSERT_TRUE(data.status.ok()) << data.status.ToString();
    ASSERT_EQ(data.sample, expected);
    EXPECT_EQ(data.label, t.full->SampleLabel(expected).value());
    const auto [first, count] = t.full->SampleFiles(expected).value();
    ASSERT_EQ(data.files.size(), count);
    for (uint64_t k = 0; k < count; ++k) {
      ASSERT_EQ(data.files[k].index, first + k);
      const auto bytes = t.full->ReadFile(first + k).value();
      ASSERT_TRUE(std::equal(bytes.begin(), bytes.end(), data.files[k].bytes.begin(),
                             data.files[k].bytes.end()));
    }
    delivered->insert(expected);
  }
}

SamplerOptions ChunkMode(uint64_t seed) {
  SamplerOptions o;
  o.mode = ShuffleMode::kChunk;
  o.seed = seed;
  o.window_chunks = 4;
  return o;
}

// Each rank of 8 plans its share from the chunks it reads and reads it through the pipeline with
// only those chunks' locations: the same samples, bytes and labels as with every location.
TEST(RankMetadataTest, RankPlansAndReadsWithItsOwnChunksLocations) {
  TwoOpenings t = Pack();
  const dataset::VersionView& view = dataset::ViewOf(*t.lazy);
  ASSERT_GT(view.chunk_count(), 100u);
  auto lazy_sampler = CreateSampler(*t.lazy, ChunkMode(3), 0);
  ASSERT_TRUE(lazy_sampler.has_value()) << lazy_sampler.error().ToString();
  auto reference = Sampler::Create(SampleChunks(*t.full), t.full->version(), ChunkMode(3));
  ASSERT_TRUE(reference.has_value());
  constexpr uint32_t kRanks = 8;
  std::set<uint32_t> every_sample;
  for (uint32_t r = 0; r < kRanks; ++r) {
    const auto plan = lazy_sampler->PlanRank({1, 0, kRanks}, kRanks, r);
    ASSERT_TRUE(plan.has_value()) << plan.error().ToString();
    ASSERT_EQ(plan->samples, reference->PlanRank({1, 0, kRanks}, kRanks, r).value().samples);
    EXPECT_FALSE(view.has_locations());
    const auto kept = view.kept_locations();
    ASSERT_NE(kept, nullptr);
    EXPECT_LT(kept->chunks.size(), view.chunk_count() / 4) << "rank " << r;

    ExpectThePipelineDelivers(t, plan->samples, &every_sample);
    EXPECT_FALSE(view.has_locations()) << "the pipeline read every location";
  }
  EXPECT_EQ(every_sample.size(), t.lazy->sample_count());
}

// A plan whose samples the kept chunks do not hold (planned before another rank's) is read with
// the whole table, loaded then, and still delivers every sample.
TEST(RankMetadataTest, PlanOutsideTheKeptChunksReadsEveryLocation) {
  TwoOpenings t = Pack();
  auto sampler = CreateSampler(*t.lazy, ChunkMode(0), 0);
  ASSERT_TRUE(sampler.has_value());
  const auto mine = sampler->PlanRank({0, 0, 8}, 8, 0).value().samples;
  ASSERT_TRUE(sampler->PlanRank({0, 0, 8}, 8, 5).has_value());  // keeps rank 5's chunks
  EXPECT_FALSE(dataset::ViewOf(*t.lazy).has_locations());
  auto pipe = ReadPipeline::Start(t.lazy, mine, {});
  ASSERT_TRUE(pipe.has_value()) << pipe.error().ToString();
  EXPECT_TRUE(dataset::ViewOf(*t.lazy).has_locations());
  for (uint32_t expected : mine) {
    auto item = (*pipe)->Next();
    ASSERT_TRUE(item.has_value() && item->has_value());
    ASSERT_TRUE((**item).status.ok());
    EXPECT_EQ((**item).sample, expected);
    EXPECT_EQ((**item).label, t.full->SampleLabel(expected).value());
  }
}

// Whole chunks of a large dataset are judged from a sample of its chunks: here "large" is more
// than 500 samples. Mixed chunks pass from the sample alone, without reading every location.
TEST(RankMetadataTest, WholeChunksJudgedFromASampleOfChunks) {
  TwoOpenings t = Pack();
  const auto sampled = ChooseShuffleUnit(*t.lazy, 4, 32, 500);
  ASSERT_TRUE(sampled.has_value()) << sampled.error().ToString();
  EXPECT_EQ(sampled->block_bytes, 0u);
  EXPECT_TRUE(sampled->mixes_well);
  EXPECT_FALSE(dataset::ViewOf(*t.lazy).has_locations());
  // The sample's estimate is close to the one from every label.
  const auto exact = ChooseShuffleUnit(*t.full, 4, 32);
  ASSERT_TRUE(exact.has_value());
  EXPECT_EQ(exact->block_bytes, 0u);
  EXPECT_NEAR(sampled->chosen.ratio(), exact->chosen.ratio(), 0.05);
}

// A WebDataset tar of 2000 samples (a .jpg, a .cls and sometimes a .json and a .seg.png each)
// packed in small chunks: in the default mixed order some samples' files land in two chunks.
TwoOpenings PackTar() {
  static const std::shared_ptr<Storage> packed = [] {
    test::TempDir tars;
    const std::string tar = tars.Join("shard.tar");
    test::WriteTar(tar, test::WdsMembers(test::RandomWdsSamples(5, 2000, 30, "s/")));
    auto storage = std::make_shared<storage::MemoryStorage>();
    dataset::PackOptions po;
    po.chunk_bytes = 16 << 10;
    EXPECT_TRUE(test::PackTars({tar}, *storage, po).has_value());
    return std::shared_ptr<Storage>(storage);
  }();
  return OpenTwice(packed);
}

// Tar samples group several files: each rank of 8 plans from the chunk table's sample counts,
// keeps its chunks' locations and samples (and the files of its samples that lie elsewhere), and
// reads exactly what the reference plan built from every location gives.
TEST(RankMetadataTest, TarSamplesPlanAndReadWithTheirChunksLocations) {
  TwoOpenings t = PackTar();
  const dataset::VersionView& view = dataset::ViewOf(*t.lazy);
  ASSERT_TRUE(view.grouped());
  ASSERT_GT(view.chunk_count(), 60u);
  // The loader's default unit: whole chunks, judged from the samples of a sample of chunks.
  const auto unit = ChooseShuffleUnit(*t.lazy, 4, 32, 500);
  ASSERT_TRUE(unit.has_value()) << unit.error().ToString();
  EXPECT_EQ(unit->block_bytes, 0u);
  EXPECT_FALSE(view.has_locations());
  auto lazy_sampler = CreateSampler(*t.lazy, ChunkMode(5), 0);
  ASSERT_TRUE(lazy_sampler.has_value()) << lazy_sampler.error().ToString();
  auto reference = Sampler::Create(SampleChunks(*t.full), t.full->version(), ChunkMode(5));
  ASSERT_TRUE(reference.has_value());
  constexpr uint32_t kRanks = 8;
  std::set<uint32_t> every_sample;
  uint64_t strays = 0;
  for (uint32_t r = 0; r < kRanks; ++r) {
    const auto plan = lazy_sampler->PlanRank({2, 0, kRanks}, kRanks, r);
    ASSERT_TRUE(plan.has_value()) << plan.error().ToString();
    ASSERT_EQ(plan->samples, reference->PlanRank({2, 0, kRanks}, kRanks, r).value().samples);
    const auto kept = view.kept_locations();
    ASSERT_NE(kept, nullptr);
    EXPECT_LT(kept->chunks.size(), view.chunk_count() / 4) << "rank " << r;
    strays += kept->files.size() - kept->chunk_begin.back();

    ExpectThePipelineDelivers(t, plan->samples, &every_sample);
    EXPECT_FALSE(view.has_locations()) << "rank " << r << " read every location";
  }
  EXPECT_EQ(every_sample.size(), t.lazy->sample_count());
  EXPECT_GT(strays, 0u) << "no sample had files in two chunks: the stray path went untested";
}

}  // namespace
}  // namespace stoker::loader
