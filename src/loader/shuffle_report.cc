#include "loader/shuffle_report.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <unordered_map>

#include "dataset/version_view.h"
#include "loader/shuffle_unit.h"

namespace stoker::loader {

namespace {

// The bytes of the `count` largest chunks: the memory a window of `count` chunks may need.
uint64_t LargestChunksBytes(std::vector<uint64_t> chunk_bytes, size_t count) {
  count = std::min(count, chunk_bytes.size());
  std::partial_sort(chunk_bytes.begin(), chunk_bytes.begin() + static_cast<ptrdiff_t>(count),
                    chunk_bytes.end(), std::greater<>());
  uint64_t bytes = 0;
  for (size_t i = 0; i < count; ++i) bytes += chunk_bytes[i];
  return bytes;
}

}  // namespace

OrderMetrics MeasureOrder(const std::vector<uint32_t>& order, const std::vector<int32_t>& labels,
                          const std::vector<uint32_t>& sample_chunks, uint32_t batch_size) {
  OrderMetrics m;
  const size_t n = order.size();
  if (n == 0) return m;
  const bool labelled = std::any_of(labels.begin(), labels.end(), [](int32_t l) { return l >= 0; });
  if (labelled && batch_size > 0) {
    double entropy_sum = 0, distinct_sum = 0;
    size_t batches = 0;
    std::unordered_map<int32_t, uint32_t> counts;
    for (size_t b = 0; b < n; b += batch_size) {
      counts.clear();
      const size_t end = std::min(n, b + batch_size);
      for (size_t i = b; i < end; ++i) ++counts[labels[order[i]]];
      double entropy = 0;
      for (const auto& [label, count] : counts) {
        const double p = static_cast<double>(count) / static_cast<double>(end - b);
        entropy -= p * std::log2(p);
      }
      entropy_sum += entropy;
      distinct_sum += static_cast<double>(counts.size());
      ++batches;
    }
    m.batch_label_entropy_bits = entropy_sum / static_cast<double>(batches);
    m.batch_distinct_classes = distinct_sum / static_cast<double>(batches);
  } else {
    m.batch_label_entropy_bits = m.batch_distinct_classes =
        std::numeric_limits<double>::quiet_NaN();
  }
  // Spearman's rho between position and storage index: both are ranks 0..n-1 already.
  double displacement = 0, d2 = 0;
  size_t same_chunk = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(i) - static_cast<double>(order[i]);
    displacement += std::abs(d);
    d2 += d * d;
    if (i > 0 && sample_chunks[order[i]] == sample_chunks[order[i - 1]]) ++same_chunk;
  }
  const double nn = static_cast<double>(n);
  m.mean_displacement = displacement / nn / nn;
  m.storage_order_correlation = n > 1 ? 1 - 6 * d2 / (nn * (nn * nn - 1)) : 1;
  m.same_chunk_neighbours = n > 1 ? static_cast<double>(same_chunk) / (nn - 1) : 0;
  return m;
}

Result<std::vector<OrderMetrics>> ShuffleReport(const std::vector<int32_t>& labels,
                                                const std::vector<uint32_t>& sample_chunks,
                                                const std::vector<uint64_t>& chunk_bytes,
                                                uint64_t dataset_version,
                                                const ShuffleReportOptions& options) {
  std::vector<OrderMetrics> rows;
  auto add = [&](ShuffleMode mode, uint32_t window) -> Status {
    SamplerOptions o;
    o.mode = mode;
    o.seed = options.seed;
    o.window_chunks = window;
    STOKER_ASSIGN_OR_RETURN(auto sampler, Sampler::Create(sample_chunks, dataset_version, o));
    STOKER_ASSIGN_OR_RETURN(const std::vector<uint32_t> order,
                            sampler.GlobalOrder(options.epoch, 1));
    OrderMetrics m = MeasureOrder(order, labels, sample_chunks, options.batch_size);
    m.mode = mode;
    m.window_chunks = mode == ShuffleMode::kChunk ? window : 0;
    // Memory to hold one window: the W largest chunks (an upper bound for any window).
    m.window_bytes = mode == ShuffleMode::kChunk ? LargestChunksBytes(chunk_bytes, window) : 0;
    uint64_t total = 0;
    for (uint64_t b : chunk_bytes) total += b;
    m.reads_per_epoch = mode == ShuffleMode::kFull ? labels.size() : chunk_bytes.size();
    m.mean_read_bytes = m.reads_per_epoch ? total / m.reads_per_epoch : 0;
    rows.push_back(m);
    return Status::OK();
  };
  STOKER_RETURN_IF_ERROR(add(ShuffleMode::kSequential, 0));
  STOKER_RETURN_IF_ERROR(add(ShuffleMode::kFull, 0));
  for (uint32_t w : options.windows) STOKER_RETURN_IF_ERROR(add(ShuffleMode::kChunk, w));
  return rows;
}

Result<std::vector<OrderMetrics>> ShuffleReport(const Dataset& dataset,
                                                const ShuffleReportOptions& options) {
  STOKER_RETURN_IF_ERROR(PrepareToLoad(dataset));
  const auto& snap = dataset::ViewOf(dataset);
  const SampleLayout layout = LayoutOf(dataset);
  const std::vector<uint32_t> sample_chunks = SampleUnits(layout.places, layout.chunk_count, 0);
  std::vector<uint64_t> chunk_bytes(snap.chunk_count());
  for (uint32_t c = 0; c < snap.chunk_count(); ++c) {
    STOKER_ASSIGN_OR_RETURN(const dataset::ChunkRef chunk, snap.chunk(c));
    chunk_bytes[c] = chunk.file_size;
  }
  STOKER_ASSIGN_OR_RETURN(
      auto rows, ShuffleReport(layout.labels, sample_chunks, chunk_bytes, snap.version(), options));

  // The loader's default: chunk mode over the unit it would choose.
  const ShuffleUnit unit = ChooseShuffleUnit(layout, options.default_window, options.batch_size);
  SamplerOptions o;
  o.mode = ShuffleMode::kChunk;
  o.seed = options.seed;
  o.window_chunks = unit.units_per_window;
  const std::vector<uint32_t> units =
      SampleUnits(layout.places, layout.chunk_count, unit.block_bytes);
  STOKER_ASSIGN_OR_RETURN(auto sampler, Sampler::Create(units, snap.version(), o));
  STOKER_ASSIGN_OR_RETURN(const std::vector<uint32_t> order, sampler.GlobalOrder(options.epoch, 1));
  OrderMetrics m = MeasureOrder(order, layout.labels, sample_chunks, options.batch_size);
  m.mode = ShuffleMode::kChunk;
  m.window_chunks = options.default_window;
  m.loader_default = true;
  m.block_bytes = unit.block_bytes;
  m.expected_classes = unit.chosen.classes_per_batch;
  m.expected_full_classes = unit.chosen.full_classes_per_batch;
  std::vector<uint32_t> distinct(units);
  std::sort(distinct.begin(), distinct.end());
  m.reads_per_epoch =
      static_cast<uint64_t>(std::unique(distinct.begin(), distinct.end()) - distinct.begin());
  m.mean_read_bytes = m.reads_per_epoch ? snap.total_bytes() / m.reads_per_epoch : 0;
  m.window_bytes = LargestChunksBytes(chunk_bytes, options.default_window);
  rows.push_back(m);
  return rows;
}

}  // namespace stoker::loader
