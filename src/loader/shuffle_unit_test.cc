#include "loader/shuffle_unit.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>

#include "dataset/packer.h"
#include "dataset/version_view.h"
#include "loader/sampler.h"
#include "loader/shuffle_report.h"
#include "storage/posix_storage.h"
#include "testing/test_util.h"

namespace stoker::loader {
namespace {

constexpr uint32_t kSampleBytes = 1000;

// An ImageFolder tree of `classes` classes x `per_class` files of kSampleBytes, packed in path
// order (class by class) or in the default mixed order, `per_chunk` files per chunk.
std::shared_ptr<Dataset> PackClasses(const test::TempDir& src, const test::TempDir& dst,
                                     uint32_t classes, uint32_t per_class, uint32_t per_chunk,
                                     dataset::StorageOrder order) {
  for (uint32_t c = 0; c < classes; ++c) {
    std::filesystem::create_directories(src.Join(fmt::format("c{:03d}", c)));
    for (uint32_t i = 0; i < per_class; ++i) {
      test::WriteStringToFile(src.Join(fmt::format("c{:03d}/{:04d}.bin", c, i)),
                              test::RandomBytes(c * 10000 + i, kSampleBytes));
    }
  }
  dataset::DirectorySourceOptions source_options;
  dataset::PackOptions options;
  options.chunk_bytes = 64 + per_chunk * (kSampleBytes + 8);
  dataset::SetStorageOrder(order, 1, &source_options, &options);
  auto source = dataset::OpenDirectorySource(src.path(), source_options);
  EXPECT_TRUE(source.has_value());
  auto storage = storage::NewPosixStorage(dst.path());
  auto packed = dataset::Pack(**source, *storage, options);
  EXPECT_TRUE(packed.has_value()) << packed.error().ToString();
  auto ds = Dataset::Open(dst.path());
  EXPECT_TRUE(ds.has_value()) << ds.error().ToString();
  return std::shared_ptr<Dataset>(std::move(*ds));
}

TEST(ShuffleUnitTest, HandComputedEstimate) {
  // 2 classes x 2 samples, every sample its own unit, batches of 2. A full shuffle misses a
  // class with probability C(2,2)/C(4,2) = 1/6, so it shows 2 x 5/6 classes per batch; so do
  // windows of 4 single-sample units (the whole dataset).
  const std::vector<int32_t> labels = {0, 0, 1, 1};
  const auto m = EstimateMixing(labels, std::vector<uint32_t>{0, 1, 2, 3}, 4, 2);
  EXPECT_TRUE(m.labelled);
  EXPECT_EQ(m.classes, 2u);
  EXPECT_NEAR(m.full_classes_per_batch, 5.0 / 3, 1e-9);
  EXPECT_NEAR(m.classes_per_batch, 5.0 / 3, 1e-9);
  // Two units, one class each, window of one unit: every batch holds one class.
  const auto worst = EstimateMixing(labels, std::vector<uint32_t>{0, 0, 1, 1}, 1, 2);
  EXPECT_NEAR(worst.classes_per_batch, 1.0, 1e-9);
  EXPECT_NEAR(worst.ratio(), 0.6, 1e-9);
}

TEST(ShuffleUnitTest, NothingToMixWithoutLabelsOrWithOneClass) {
  const auto none =
      EstimateMixing(std::vector<int32_t>{-1, -1, -1}, std::vector<uint32_t>{0, 0, 1}, 1, 2);
  EXPECT_FALSE(none.labelled);
  EXPECT_EQ(none.ratio(), 1.0);
  const auto one =
      EstimateMixing(std::vector<int32_t>{4, 4, 4}, std::vector<uint32_t>{0, 1, 2}, 1, 2);
  EXPECT_FALSE(one.labelled);
  EXPECT_EQ(one.classes, 1u);
}

TEST(ShuffleUnitTest, BlocksAreContiguousRunsOfAChunkInStorageOrder) {
  test::TempDir src, dst;
  auto ds = PackClasses(src, dst, 4, 30, 12, dataset::StorageOrder::kMixed);
  EXPECT_EQ(SampleUnits(*ds, 0), SampleChunks(*ds));
  const auto& snap = dataset::ViewOf(*ds);
  // 12 samples per chunk, blocks of 3 samples' bytes: 4 blocks of 3 samples per chunk.
  const auto units = SampleUnits(*ds, 3 * kSampleBytes);
  std::map<uint32_t, std::vector<uint64_t>> offsets;  // unit -> its samples' offsets
  std::map<uint32_t, uint32_t> chunk_of_unit;
  for (uint32_t s = 0; s < ds->sample_count(); ++s) {
    const auto r = snap.file(snap.SampleFiles(s).first);
    offsets[units[s]].push_back(r.offset);
    auto [it, inserted] = chunk_of_unit.try_emplace(units[s], r.chunk);
    EXPECT_EQ(it->second, r.chunk) << "a block spans two chunks";
  }
  for (auto& [unit, offs] : offsets) {
    std::sort(offs.begin(), offs.end());
    EXPECT_LE(offs.size(), 3u);
    for (size_t i = 1; i < offs.size(); ++i) EXPECT_EQ(offs[i], offs[i - 1] + kSampleBytes) << unit;
  }
  EXPECT_EQ(offsets.size(), 40u);  // 120 samples in 10 chunks of 4 blocks
  EXPECT_EQ(UnitsPerWindow(*ds, 2, 3 * kSampleBytes), 8u);
  EXPECT_EQ(UnitsPerWindow(*ds, 2, 0), 2u);
}

TEST(ShuffleUnitTest, ClassOrderedDataGetsBlocksMixedDataWholeChunks) {
  // 50 classes x 40 samples, 20 per chunk: in path order each chunk holds half a class.
  test::TempDir src, path_dst, mixed_dst;
  auto by_path = PackClasses(src, path_dst, 50, 40, 20, dataset::StorageOrder::kInput);
  auto mixed = PackClasses(src, mixed_dst, 50, 40, 20, dataset::StorageOrder::kMixed);

  const ShuffleUnit path_unit = ChooseShuffleUnit(*by_path, 4, 32).value();
  EXPECT_LT(path_unit.whole_chunks.ratio(), 0.5);  // ~4 classes per batch of 32
  EXPECT_GT(path_unit.block_bytes, 0u);
  EXPECT_TRUE(path_unit.mixes_well);
  EXPECT_GE(path_unit.chosen.ratio(), kMixingTarget);

  const ShuffleUnit mixed_unit = ChooseShuffleUnit(*mixed, 4, 32).value();
  EXPECT_EQ(mixed_unit.block_bytes, 0u);
  EXPECT_TRUE(mixed_unit.mixes_well);

  // The estimate agrees with what the sampler's order really gives.
  for (const auto& [ds, unit] : {std::pair{by_path, path_unit}, std::pair{mixed, mixed_unit}}) {
    SamplerOptions o;
    o.window_chunks = unit.units_per_window;
    auto sampler = Sampler::Create(SampleUnits(*ds, unit.block_bytes), ds->version(), o);
    ASSERT_TRUE(sampler.has_value());
    double measured = 0;
    for (uint64_t epoch = 0; epoch < 4; ++epoch) {
      measured += MeasureOrder(sampler->GlobalOrder(epoch, 1).value(), SampleLabels(*ds),
                               SampleChunks(*ds), 32)
                      .batch_distinct_classes /
                  4;
    }
    EXPECT_NEAR(measured, unit.chosen.classes_per_batch, 0.05 * unit.chosen.classes_per_batch);
  }
}

TEST(ShuffleUnitTest, WindowLargerThanTheDataset) {
  test::TempDir src, dst;
  auto ds = PackClasses(src, dst, 5, 10, 10, dataset::StorageOrder::kInput);
  const ShuffleUnit unit = ChooseShuffleUnit(*ds, 1000, 256).value();  // batch > dataset too
  EXPECT_EQ(unit.block_bytes, 0u);  // one window holds everything: mixed like a full shuffle
  EXPECT_TRUE(unit.mixes_well);
  EXPECT_NEAR(unit.chosen.classes_per_batch, 5.0, 1e-9);
}

TEST(ShuffleUnitTest, ReportHasTheLoaderDefaultRow) {
  test::TempDir src, dst;
  auto ds = PackClasses(src, dst, 50, 40, 20, dataset::StorageOrder::kInput);
  ShuffleReportOptions o;
  o.batch_size = 32;
  o.windows = {4};
  o.default_window = 4;
  auto rows = ShuffleReport(*ds, o);
  ASSERT_TRUE(rows.has_value());
  const OrderMetrics& d = rows->back();
  EXPECT_TRUE(d.loader_default);
  EXPECT_GT(d.block_bytes, 0u);
  EXPECT_GT(d.reads_per_epoch, (*rows)[2].reads_per_epoch);  // more, smaller reads than W=4
  EXPECT_GT(d.batch_distinct_classes, 2 * (*rows)[2].batch_distinct_classes);
  EXPECT_GE(d.batch_distinct_classes, 0.9 * (*rows)[1].batch_distinct_classes);  // vs full
}

}  // namespace
}  // namespace stoker::loader
