// How random is an order? Measures a sampler configuration against a full permutation, so a user
// can choose the chunk-shuffle window W with numbers (`stoker shuffle-report`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loader/sampler.h"
#include "stoker/dataset.h"

namespace stoker::loader {

struct OrderMetrics {
  ShuffleMode mode = ShuffleMode::kFull;
  uint32_t window_chunks = 0;  // chunk mode only
  // Labels (NaN when the dataset has none): mean over batches.
  double batch_label_entropy_bits = 0;  // Shannon entropy of a batch's label histogram
  double batch_distinct_classes = 0;
  // Position: how far samples move from storage order, as a fraction of the dataset (a full
  // permutation gives ~1/3), and the rank correlation of order position with storage position
  // (1 = storage order, ~0 = no relation).
  double mean_displacement = 0;
  double storage_order_correlation = 0;
  // Locality: the fraction of consecutive samples that come from the same chunk (what makes
  // reads sequential).
  double same_chunk_neighbours = 0;
  uint64_t window_bytes = 0;  // memory a reader needs to hold one window (largest window)
  // I/O: reads of one epoch (whole chunks, blocks, or one per sample in full mode) and their
  // mean size, for a reader whose budget holds two windows.
  uint64_t reads_per_epoch = 0;
  uint64_t mean_read_bytes = 0;
  // The loader's default row (ChooseShuffleUnit): its shuffle unit (0: whole chunks) and the
  // expected distinct classes per batch of this order and of a full shuffle (shuffle_unit.h).
  bool loader_default = false;
  uint64_t block_bytes = 0;
  double expected_classes = 0, expected_full_classes = 0;
};

struct ShuffleReportOptions {
  uint32_t batch_size = 256;
  uint64_t seed = 0;
  uint64_t epoch = 0;
  std::vector<uint32_t> windows = {1, 4, 16, 64};  // chunk-mode W values to report
  uint32_t default_window = 16;  // the loader's window, for the default row (dataset overload)
};

// Metrics of `order` (a permutation of the samples) given each sample's label (-1: none),
// chunk, and each chunk's bytes.
OrderMetrics MeasureOrder(const std::vector<uint32_t>& order, const std::vector<int32_t>& labels,
                          const std::vector<uint32_t>& sample_chunks, uint32_t batch_size);

// Rows: sequential, full, then chunk mode for each W.
Result<std::vector<OrderMetrics>> ShuffleReport(const std::vector<int32_t>& labels,
                                                const std::vector<uint32_t>& sample_chunks,
                                                const std::vector<uint64_t>& chunk_bytes,
                                                uint64_t dataset_version,
                                                const ShuffleReportOptions& options);

// The same for a dataset (its samples' labels and chunks, and its chunks' sizes), plus a last
// row for what the loader does by default: chunk mode with window default_window and the
// shuffle unit ChooseShuffleUnit picks.
Result<std::vector<OrderMetrics>> ShuffleReport(const Dataset& dataset,
                                                const ShuffleReportOptions& options);

}  // namespace stoker::loader
