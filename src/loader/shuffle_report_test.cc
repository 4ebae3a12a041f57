#include "loader/shuffle_report.h"

#include <gtest/gtest.h>

#include <cmath>

namespace stoker::loader {
namespace {

TEST(ShuffleReportTest, HandComputedMetrics) {
  // 4 samples, labels 0 0 1 1, chunks 0 0 1 1; order 1 0 3 2, batches of 2.
  const auto m = MeasureOrder({1, 0, 3, 2}, {0, 0, 1, 1}, {0, 0, 1, 1}, 2);
  EXPECT_DOUBLE_EQ(m.batch_label_entropy_bits, 0.0);  // each batch holds one class
  EXPECT_DOUBLE_EQ(m.batch_distinct_classes, 1.0);
  EXPECT_DOUBLE_EQ(m.mean_displacement, 4.0 / 4 / 4);  // every sample moved by 1
  EXPECT_DOUBLE_EQ(m.storage_order_correlation, 1 - 6.0 * 4 / (4 * 15));
  EXPECT_DOUBLE_EQ(m.same_chunk_neighbours, 2.0 / 3);

  // Order 0 2 1 3: each batch of 2 holds both classes: 1 bit.
  const auto mixed = MeasureOrder({0, 2, 1, 3}, {0, 0, 1, 1}, {0, 0, 1, 1}, 2);
  EXPECT_DOUBLE_EQ(mixed.batch_label_entropy_bits, 1.0);
  EXPECT_DOUBLE_EQ(mixed.batch_distinct_classes, 2.0);
  EXPECT_DOUBLE_EQ(mixed.same_chunk_neighbours, 0.0);
}

TEST(ShuffleReportTest, UnlabelledGivesNaN) {
  const auto m = MeasureOrder({0, 1}, {-1, -1}, {0, 0}, 2);
  EXPECT_TRUE(std::isnan(m.batch_label_entropy_bits));
}

TEST(ShuffleReportTest, LargerWindowsMixBetterOnClassOrderedData) {
  // 100 classes of 100 samples stored in class order, 10 samples per chunk: the worst case.
  std::vector<int32_t> labels;
  std::vector<uint32_t> chunks;
  for (uint32_t s = 0; s < 10000; ++s) {
    labels.push_back(static_cast<int32_t>(s / 100));
    chunks.push_back(s / 10);
  }
  ShuffleReportOptions o;
  o.batch_size = 64;
  o.windows = {1, 8, 64};
  auto rows = ShuffleReport(labels, chunks, std::vector<uint64_t>(1000, 1 << 20), 1, o);
  ASSERT_TRUE(rows.has_value());
  ASSERT_EQ(rows->size(), 5u);
  const auto& seq = (*rows)[0];
  const auto& full = (*rows)[1];
  EXPECT_NEAR(seq.storage_order_correlation, 1.0, 1e-9);
  EXPECT_NEAR(full.storage_order_correlation, 0.0, 0.05);
  EXPECT_LT(seq.batch_distinct_classes, 3);
  EXPECT_GT(full.batch_distinct_classes, 40);
  // Entropy grows with W and stays below the full permutation's.
  EXPECT_LT((*rows)[2].batch_label_entropy_bits, (*rows)[3].batch_label_entropy_bits);
  EXPECT_LT((*rows)[3].batch_label_entropy_bits, (*rows)[4].batch_label_entropy_bits);
  EXPECT_LE((*rows)[4].batch_label_entropy_bits, full.batch_label_entropy_bits + 0.05);
  EXPECT_EQ((*rows)[3].window_bytes, 8u << 20);
}

}  // namespace
}  // namespace stoker::loader
