#include "loader/shuffle_unit.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>

#include <fmt/format.h>

#include "common/random.h"
#include "dataset/version_view.h"
#include "loader/rank_metadata.h"
#include "loader/sampler.h"

namespace stoker::loader {
namespace {

std::vector<SamplePlace> SamplePlaces(const dataset::VersionView& snap) {
  std::vector<SamplePlace> places(snap.sample_count());
  for (uint64_t s = 0; s < snap.sample_count(); ++s) {
    const auto [file0, count] = snap.SampleFiles(s);
    const dataset::FileLocation first = snap.file(file0);
    uint64_t bytes = 0;
    for (uint64_t k = 0; k < count; ++k) bytes += snap.file(file0 + k).length;
    places[s] = {first.chunk, first.offset, bytes};
  }
  return places;
}

// start × blocks can pass 2^64 for chunks of several GiB cut into many blocks.
__extension__ using Uint128 = unsigned __int128;

// P(a batch of b drawn without replacement from p samples misses all n of one label).
double MissProbability(double p, double n, double b) {
  if (p - n < b) return 0;
  // lgamma_r: std::lgamma writes the global signgam, and loaders may estimate concurrently.
  int sign = 0;
  return std::exp(::lgamma_r(p - n + 1, &sign) - ::lgamma_r(p - n - b + 1, &sign) -
                  ::lgamma_r(p + 1, &sign) + ::lgamma_r(p - b + 1, &sign));
}

double ExpectedDistinct(std::span<const uint32_t> counts, uint64_t pool, uint32_t batch_size) {
  const double p = static_cast<double>(pool);
  const double b = std::min<double>(batch_size, p);
  double expected = 0;
  for (uint32_t n : counts) {
    if (n > 0) expected += 1 - MissProbability(p, n, b);
  }
  return expected;
}

constexpr uint32_t kWindowsEstimated = 64;
constexpr uint64_t kEstimateSeed = 0x6d6978696e67;  // "mixing": any fixed value

}  // namespace

std::vector<int32_t> SampleLabels(const Dataset& dataset) {
  const auto& snap = dataset::ViewOf(dataset);
  std::vector<int32_t> labels(snap.sample_count());
  for (uint64_t s = 0; s < snap.sample_count(); ++s) labels[s] = snap.sample_label(s);
  return labels;
}

std::vector<uint32_t> SampleUnits(const Dataset& dataset, uint64_t block_bytes) {
  if (block_bytes == 0) return SampleChunks(dataset);
  const auto& snap = dataset::ViewOf(dataset);
  return SampleUnits(SamplePlaces(snap), snap.chunk_count(), block_bytes);
}

std::vector<uint32_t> SampleUnits(std::span<const SamplePlace> places, uint32_t chunk_count,
                                  uint64_t block_bytes) {
  std::vector<uint32_t> chunk_of(places.size());
  for (size_t s = 0; s < places.size(); ++s) chunk_of[s] = places[s].chunk;
  if (block_bytes == 0) return chunk_of;
  SampleGroups by_chunk = GroupByUnit(chunk_of, chunk_count);
  std::vector<uint64_t> payload(chunk_count, 0);
  for (const SamplePlace& p : places) payload[p.chunk] += p.bytes;
  auto blocks_of = [&](uint32_t c) {
    return std::max<uint64_t>(1, (payload[c] + block_bytes - 1) / block_bytes);
  };
  // Unit ids are u32: a block size so small that they would not fit grows until they do.
  uint64_t total_blocks = 0;
  for (uint32_t c = 0; c < chunk_count; ++c) total_blocks += blocks_of(c);
  if (total_blocks >= UINT32_MAX) {
    uint64_t total = 0;
    for (uint64_t b : payload) total += b;
    block_bytes = std::max(block_bytes, total / (UINT32_MAX / 2 - chunk_count) + 1);
  }
  std::vector<uint32_t> units(places.size());
  uint64_t next_unit = 0;
  for (uint32_t c = 0; c < chunk_count; ++c) {
    const std::span<uint32_t> members(by_chunk.members.data() + by_chunk.begin[c],
                                      by_chunk.begin[c + 1] - by_chunk.begin[c]);
    if (members.empty()) continue;
    std::sort(members.begin(), members.end(),
              [&](uint32_t a, uint32_t b) { return places[a].offset < places[b].offset; });
    const uint64_t blocks = blocks_of(c);
    uint64_t start = 0;  // the sample's first byte within the chunk's payload
    for (uint32_t s : members) {
      const auto block =
          payload[c] == 0
              ? 0
              : static_cast<uint64_t>(static_cast<Uint128>(start) * blocks / payload[c]);
      units[s] = static_cast<uint32_t>(next_unit + std::min(blocks - 1, block));
      start += places[s].bytes;
    }
    next_unit += blocks;
  }
  return units;
}

namespace {

// The mean payload of a chunk: what a whole-chunk unit holds, and what blocks divide. `total` is
// the bytes of all samples (= of all files: every file belongs to one sample).
uint64_t MeanChunkBytes(uint64_t total, uint32_t chunks) { return total / std::max(1u, chunks); }

// Whether an estimate counts as mixed like a full shuffle. Compared in per-mille, so that a libm
// rounding its last bit differently on another host cannot flip the choice (every rank makes it
// on its own).
bool MixesWell(const MixingEstimate& m) {
  return !m.labelled || std::llround(m.ratio() * 1000) >= std::llround(kMixingTarget * 1000);
}

uint64_t TotalBytes(const SampleLayout& layout) {
  uint64_t total = 0;
  for (const SamplePlace& p : layout.places) total += p.bytes;
  return total;
}

// Units per window from the mean chunk payload (`total` bytes over `chunks`).
uint32_t UnitsPerWindow(uint64_t total, uint32_t chunks, uint32_t window_chunks,
                        uint64_t block_bytes) {
  if (block_bytes == 0) return window_chunks;
  const uint64_t mean_chunk = MeanChunkBytes(total, chunks);
  const uint64_t per_chunk = std::max<uint64_t>(1, (mean_chunk + block_bytes - 1) / block_bytes);
  return static_cast<uint32_t>(std::min<uint64_t>(UINT32_MAX, window_chunks * per_chunk));
}

}  // namespace

uint32_t UnitsPerWindow(const Dataset& dataset, uint32_t window_chunks, uint64_t block_bytes) {
  const auto& snap = dataset::ViewOf(dataset);
  return UnitsPerWindow(snap.total_bytes(), snap.chunk_count(), window_chunks, block_bytes);
}

uint32_t UnitsPerWindow(const SampleLayout& layout, uint32_t window_chunks, uint64_t block_bytes) {
  return UnitsPerWindow(TotalBytes(layout), layout.chunk_count, window_chunks, block_bytes);
}

Result<Sampler> CreateSampler(const Dataset& dataset, SamplerOptions options,
                              uint64_t block_bytes) {
  STOKER_ASSIGN_OR_RETURN(auto units, DatasetUnits(dataset, block_bytes));
  options.window_chunks = UnitsPerWindow(dataset, options.window_chunks, block_bytes);
  return Sampler::Create(std::move(units), dataset.version(), options);
}

SampleLayout LayoutOf(const Dataset& dataset) {
  const auto& snap = dataset::ViewOf(dataset);
  return {SampleLabels(dataset), SamplePlaces(snap), snap.chunk_count()};
}

MixingEstimate EstimateMixing(std::span<const int32_t> labels,
                              std::span<const uint32_t> sample_units, uint32_t units_per_window,
                              uint32_t batch_size) {
  MixingEstimate m;
  // Dense label ids, so counts are plain arrays.
  std::unordered_map<int32_t, uint32_t> dense;
  std::vector<uint32_t> label_id(labels.size(), UINT32_MAX);
  for (size_t s = 0; s < labels.size(); ++s) {
    if (labels[s] < 0) continue;
    label_id[s] = dense.try_emplace(labels[s], static_cast<uint32_t>(dense.size())).first->second;
  }
  m.classes = static_cast<uint32_t>(dense.size());
  m.labelled = m.classes >= 2;
  if (!m.labelled) {
    m.classes_per_batch = m.full_classes_per_batch = m.classes;
    return m;
  }
  std::vector<uint32_t> counts(m.classes, 0);
  uint64_t labelled_samples = 0;
  for (uint32_t id : label_id) {
    if (id != UINT32_MAX) ++counts[id], ++labelled_samples;
  }
  m.full_classes_per_batch = ExpectedDistinct(counts, labelled_samples, batch_size);

  // Units in a fixed random order, then consecutive windows of them, as the sampler forms them.
  const uint32_t unit_count =
      sample_units.empty() ? 0 : *std::max_element(sample_units.begin(), sample_units.end()) + 1;
  const SampleGroups by_unit = GroupByUnit(sample_units, unit_count);
  std::vector<uint32_t> units;
  for (uint32_t u = 0; u < unit_count; ++u) {
    if (by_unit.begin[u + 1] > by_unit.begin[u]) units.push_back(u);
  }
  Pcg32 rng(kEstimateSeed);
  Shuffle(std::span<uint32_t>(units), rng);
  const uint32_t per_window = std::max(1u, units_per_window);
  std::fill(counts.begin(), counts.end(), 0);
  std::vector<uint32_t> touched;
  uint64_t pool = 0, pooled = 0;
  double sum = 0;  // over windows: expected distinct labels x the window's samples
  uint32_t windows = 0;
  for (size_t w = 0; w < units.size() && windows < kWindowsEstimated; w += per_window) {
    for (size_t i = w; i < std::min(units.size(), w + per_window); ++i) {
      for (uint32_t k = by_unit.begin[units[i]]; k < by_unit.begin[units[i] + 1]; ++k) {
        const uint32_t id = label_id[by_unit.members[k]];
        if (id == UINT32_MAX) continue;
        if (counts[id]++ == 0) touched.push_back(id);
        ++pool;
      }
    }
    // A window smaller than a batch shares its batches with the next: pool them.
    const bool last = w + per_window >= units.size();
    if (pool < batch_size && !last) continue;
    std::vector<uint32_t> window_counts;
    window_counts.reserve(touched.size());
    for (uint32_t id : touched) window_counts.push_back(counts[id]);
    // Weighed by samples: a window's share of an epoch's batches.
    sum += ExpectedDistinct(window_counts, pool, batch_size) * static_cast<double>(pool);
    pooled += pool;
    ++windows;
    for (uint32_t id : touched) counts[id] = 0;
    touched.clear();
    pool = 0;
  }
  m.classes_per_batch = pooled > 0 ? sum / static_cast<double>(pooled) : m.full_classes_per_batch;
  return m;
}

ShuffleUnit FixedShuffleUnit(const SampleLayout& layout, uint32_t window_chunks,
                             uint32_t batch_size, uint64_t block_bytes) {
  ShuffleUnit unit;
  unit.block_bytes = block_bytes;
  unit.units_per_window = UnitsPerWindow(layout, window_chunks, block_bytes);
  unit.chosen =
      EstimateMixing(layout.labels, SampleUnits(layout.places, layout.chunk_count, block_bytes),
                     unit.units_per_window, batch_size);
  unit.whole_chunks =
      block_bytes == 0
          ? unit.chosen
          : EstimateMixing(layout.labels, SampleUnits(layout.places, layout.chunk_count, 0),
                           window_chunks, batch_size);
  unit.mixes_well = MixesWell(unit.chosen);
  return unit;
}

ShuffleUnit ChooseShuffleUnit(const SampleLayout& layout, uint32_t window_chunks,
                              uint32_t batch_size) {
  ShuffleUnit unit = FixedShuffleUnit(layout, window_chunks, batch_size, 0);
  if (unit.mixes_well) return unit;
  const uint64_t total = TotalBytes(layout);
  const uint64_t mean_chunk = MeanChunkBytes(total, layout.chunk_count);
  const uint64_t mean_sample = total / std::max<uint64_t>(1, layout.places.size());
  for (uint32_t k : kBlocksPerChunk) {
    const uint64_t block = (mean_chunk + k - 1) / k;
    if (block < std::max<uint64_t>(1, mean_sample)) break;
    unit.block_bytes = block;
    unit.units_per_window = UnitsPerWindow(layout, window_chunks, block);
    unit.chosen =
        EstimateMixing(layout.labels, SampleUnits(layout.places, layout.chunk_count, block),
                       unit.units_per_window, batch_size);
    unit.mixes_well = MixesWell(unit.chosen);
    if (unit.mixes_well) break;
  }
  return unit;
}

Status ValidateBlockSize(const Dataset& dataset, uint64_t block_bytes) {
  const auto& snap = dataset::ViewOf(dataset);
  const uint64_t mean_sample = snap.total_bytes() / std::max<uint64_t>(1, snap.sample_count());
  if (block_bytes != 0 && block_bytes < mean_sample) {
    return Status::InvalidArgument(fmt::format(
        "block_size {} is smaller than the mean sample ({} bytes): use 0 (whole chunks), None "
        "(chosen from the labels) or at least {}",
        block_bytes, mean_sample, mean_sample));
  }
  return Status::OK();
}

namespace {

// Whether judging whole chunks from a sample of chunks holding `limit` samples reads less than
// every location: the chunks it needs (about limit / mean samples per chunk) must be at most
// half of them — a dataset of a few huge chunks is judged from every label, read once.
bool WorthSampling(const Dataset& dataset, uint64_t limit) {
  const double chunks = dataset::ViewOf(dataset).chunk_count(), samples = dataset.sample_count();
  if (samples <= static_cast<double>(limit)) return false;
  return std::ceil(static_cast<double>(limit) * chunks / samples) * 2 <= chunks;
}

// Whole chunks in a fixed random order, taken until they hold `limit` samples, with the
// samples that start in them (their unit), their labels and places (chunks renumbered 0, 1,
// ...): read chunk by chunk. nullopt if a chunk record does not say its samples (a tar-grouped
// segment of format 2): such a version is judged from every label.
Result<std::optional<SampleLayout>> SampledLayout(const Dataset& dataset, uint64_t limit) {
  const dataset::VersionView& view = dataset::ViewOf(dataset);
  std::vector<uint32_t> chunks;
  for (uint32_t c = 0; c < view.chunk_count(); ++c) {
    STOKER_ASSIGN_OR_RETURN(const dataset::ChunkRef chunk, view.chunk(c));
    if (!chunk.sample_count) return std::optional<SampleLayout>();
    if (*chunk.sample_count > 0) chunks.push_back(c);
  }
  Pcg32 rng(kEstimateSeed);
  Shuffle(std::span<uint32_t>(chunks), rng);
  SampleLayout layout;
  std::vector<std::pair<uint64_t, dataset::FileLocation>> files;
  std::vector<dataset::SampleRef> samples;
  for (uint32_t c : chunks) {
    if (layout.places.size() >= limit) break;
    files.clear();
    samples.clear();
    STOKER_RETURN_IF_ERROR(view.ReadChunk(c, &files, view.grouped() ? &samples : nullptr));
    if (!view.grouped()) {  // each file is a sample
      for (const auto& [index, l] : files) {
        layout.labels.push_back(l.label);
        layout.places.push_back({layout.chunk_count, l.offset, l.length});
      }
      ++layout.chunk_count;
      continue;
    }
    std::sort(files.begin(), files.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const dataset::SampleRef& s : samples) {
      // The sample's files in this chunk (its first at least): label and bytes.
      auto it = std::lower_bound(files.begin(), files.end(), s.first_file,
                                 [](const auto& f, uint64_t index) { return f.first < index; });
      const dataset::FileLocation& first = it->second;
      uint64_t bytes = 0;
      for (; it != files.end() && it->first < s.first_file + s.count; ++it) {
        bytes += it->second.length;
      }
      layout.labels.push_back(first.label);
      layout.places.push_back({layout.chunk_count, first.offset, bytes});
    }
    ++layout.chunk_count;
  }
  return std::optional<SampleLayout>(std::move(layout));
}

Result<SampleLayout> FullLayout(const Dataset& dataset) {
  STOKER_RETURN_IF_ERROR(PrepareToLoad(dataset));
  return LayoutOf(dataset);
}

}  // namespace

Result<ShuffleUnit> FixedShuffleUnit(const Dataset& dataset, uint32_t window_chunks,
                                     uint32_t batch_size, uint64_t block_bytes,
                                     uint64_t estimate_samples) {
  if (block_bytes == 0 && WorthSampling(dataset, estimate_samples)) {
    STOKER_ASSIGN_OR_RETURN(const auto sampled, SampledLayout(dataset, estimate_samples));
    if (sampled) return FixedShuffleUnit(*sampled, window_chunks, batch_size, 0);
  }
  STOKER_ASSIGN_OR_RETURN(const SampleLayout layout, FullLayout(dataset));
  return FixedShuffleUnit(layout, window_chunks, batch_size, block_bytes);
}

Result<ShuffleUnit> ChooseShuffleUnit(const Dataset& dataset, uint32_t window_chunks,
                                      uint32_t batch_size, uint64_t estimate_samples) {
  if (WorthSampling(dataset, estimate_samples)) {
    STOKER_ASSIGN_OR_RETURN(const auto sampled, SampledLayout(dataset, estimate_samples));
    if (sampled) {
      ShuffleUnit unit = FixedShuffleUnit(*sampled, window_chunks, batch_size, 0);
      if (unit.mixes_well) return unit;
    }
  }
  STOKER_ASSIGN_OR_RETURN(const SampleLayout layout, FullLayout(dataset));
  return ChooseShuffleUnit(layout, window_chunks, batch_size);
}

}  // namespace stoker::loader
