#include "loader/sampler.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include <fmt/format.h>

#include "common/random.h"
#include "dataset/version_view.h"
#include "loader/chunk_streams.h"
#include "stoker/dataset.h"

namespace stoker::loader {
namespace {

constexpr uint64_t kSaltChunks = 1;   // generator for the chunk permutation
constexpr uint64_t kSaltSamples = 2;  // generator for sample permutations

// Units as each sample's unit, grouped in memory (CSR).
class InMemoryUnits final : public UnitSource {
 public:
  explicit InMemoryUnits(std::span<const uint32_t> sample_units) {
    const uint32_t unit_count =
        sample_units.empty() ? 0 : *std::max_element(sample_units.begin(), sample_units.end()) + 1;
    groups_ = GroupByUnit(sample_units, unit_count);
    counts_.resize(unit_count);
    for (uint32_t u = 0; u < unit_count; ++u) counts_[u] = groups_.begin[u + 1] - groups_.begin[u];
  }
  std::span<const uint32_t> counts() const override { return counts_; }
  Status Prepare(std::span<const uint32_t>) const override { return Status::OK(); }
  Result<std::vector<uint32_t>> Members(uint32_t unit) const override {
    return std::vector<uint32_t>(groups_.members.begin() + groups_.begin[unit],
                                 groups_.members.begin() + groups_.begin[unit + 1]);
  }

 private:
  SampleGroups groups_;
  std::vector<uint32_t> counts_;
};

}  // namespace

std::string_view ShuffleModeName(ShuffleMode mode) {
  switch (mode) {
    case ShuffleMode::kSequential:
      return "sequential";
    case ShuffleMode::kFull:
      return "full";
    case ShuffleMode::kChunk:
      return "chunk";
  }
  return "?";
}

Result<ShuffleMode> ParseShuffleMode(std::string_view name) {
  if (name == "sequential") return ShuffleMode::kSequential;
  if (name == "full") return ShuffleMode::kFull;
  if (name == "chunk") return ShuffleMode::kChunk;
  return Err(Status::InvalidArgument(
      fmt::format("unknown shuffle mode '{}' (sequential, full or chunk)", name)));
}

Status SamplerOptions::Validate() const {
  if (mode == ShuffleMode::kChunk && window_chunks == 0) {
    return Status::InvalidArgument("the chunk-shuffle window must hold at least one chunk");
  }
  return Status::OK();
}

uint64_t EpochSeed(uint64_t seed, uint64_t epoch, uint64_t dataset_version, uint64_t salt) {
  return DeriveSeed({seed, epoch, dataset_version, salt});
}

std::shared_ptr<const UnitSource> UnitsInMemory(std::vector<uint32_t> sample_units) {
  return std::make_shared<InMemoryUnits>(sample_units);
}

Result<Sampler> Sampler::Create(std::vector<uint32_t> sample_units, uint64_t dataset_version,
                                const SamplerOptions& options) {
  return Create(UnitsInMemory(std::move(sample_units)), dataset_version, options);
}

Result<Sampler> Sampler::Create(std::shared_ptr<const UnitSource> units, uint64_t dataset_version,
                                const SamplerOptions& options) {
  STOKER_RETURN_IF_ERROR(options.Validate());
  uint64_t total = 0;
  for (uint32_t c : units->counts()) total += c;
  if (total > std::numeric_limits<uint32_t>::max()) {
    return Err(Status::Unsupported(
        fmt::format("{} samples: the sampler plans up to 2^32 - 1 per epoch", total)));
  }
  return Sampler(std::move(units), static_cast<uint32_t>(total), dataset_version, options);
}

Result<std::vector<uint32_t>> Sampler::AllMembers() const {
  std::vector<uint32_t> units;
  const std::span<const uint32_t> counts = units_->counts();
  for (uint32_t u = 0; u < counts.size(); ++u) {
    if (counts[u] > 0) units.push_back(u);
  }
  STOKER_RETURN_IF_ERROR(units_->Prepare(units));
  std::vector<uint32_t> all;
  all.reserve(sample_count_);
  for (uint32_t u : units) {
    STOKER_ASSIGN_OR_RETURN(const std::vector<uint32_t> members, units_->Members(u));
    all.insert(all.end(), members.begin(), members.end());
  }
  return all;
}

Result<std::vector<uint32_t>> Sampler::GlobalOrder(uint64_t epoch, uint32_t world_size) const {
  const uint32_t n = sample_count();
  if (options_.mode == ShuffleMode::kFull) {
    std::vector<uint32_t> order(n);
    std::iota(order.begin(), order.end(), 0u);
    Pcg32 rng(EpochSeed(options_.seed, epoch, version_, kSaltSamples));
    Shuffle(std::span<uint32_t>(order), rng);
    return order;
  }
  if (options_.mode == ShuffleMode::kSequential) {
    // Storage order, chunk after chunk: with files placed in chunks in a mixed order, index
    // order would read every chunk a little at a time.
    return AllMembers();
  }
  const uint32_t ranks = std::max(1u, world_size);
  ChunkStreams streams(units_->counts(), options_.window_chunks,
                       EpochSeed(options_.seed, epoch, version_, kSaltChunks), ranks);
  for (uint64_t q = 0; q < n; ++q) streams.Want(static_cast<uint32_t>(q % ranks), q / ranks);
  STOKER_RETURN_IF_ERROR(Materialize(streams, epoch));
  std::vector<uint32_t> order(n);
  for (uint64_t q = 0; q < n; ++q) {
    order[q] = streams.Element(static_cast<uint32_t>(q % ranks), q / ranks);
  }
  return order;
}

Status Sampler::Materialize(ChunkStreams& streams, uint64_t epoch) const {
  STOKER_RETURN_IF_ERROR(units_->Prepare(streams.NeededUnits()));
  return streams.Materialize(EpochSeed(options_.seed, epoch, version_, kSaltSamples),
                             [&](uint32_t unit) { return units_->Members(unit); });
}

Result<Sampler::RankPlan> Sampler::PlanRank(const SamplerState& state, uint32_t world_size,
                                            uint32_t rank) const {
  RankPlan plan;
  const uint64_t n = sample_count();
  const uint32_t ranks = std::max(1u, world_size);
  if (n == 0 || rank >= ranks) return plan;
  const uint64_t start = std::min<uint64_t>(state.position, n);
  const uint64_t remaining = n - start;
  const uint64_t per_rank =
      options_.drop_last ? remaining / ranks : (remaining + ranks - 1) / ranks;
  plan.dropped = options_.drop_last ? remaining - per_rank * ranks : 0;
  plan.samples.reserve(per_rank);
  // Position q of G, or, past its end, the start of G that fills the last round.
  auto source = [&](uint64_t i) {
    const uint64_t q = start + i * ranks + rank;
    return q < n ? q : (q - n) % n;
  };
  for (uint64_t i = 0; i < per_rank; ++i) plan.padded += start + i * ranks + rank >= n ? 1 : 0;

  if (options_.mode == ShuffleMode::kChunk && state.planned_world_size == ranks &&
      start % ranks == 0) {
    // G[q] is stream (q mod R)'s element q / R: build only the windows those lie in.
    ChunkStreams streams(units_->counts(), options_.window_chunks,
                         EpochSeed(options_.seed, state.epoch, version_, kSaltChunks), ranks);
    for (uint64_t i = 0; i < per_rank; ++i) {
      const uint64_t q = source(i);
      streams.Want(static_cast<uint32_t>(q % ranks), q / ranks);
    }
    STOKER_RETURN_IF_ERROR(Materialize(streams, state.epoch));
    for (uint64_t i = 0; i < per_rank; ++i) {
      const uint64_t q = source(i);
      plan.samples.push_back(streams.Element(static_cast<uint32_t>(q % ranks), q / ranks));
    }
    return plan;
  }
  STOKER_ASSIGN_OR_RETURN(const std::vector<uint32_t> order,
                          GlobalOrder(state.epoch, state.planned_world_size));
  for (uint64_t i = 0; i < per_rank; ++i) plan.samples.push_back(order[source(i)]);
  return plan;
}

SampleGroups GroupByUnit(std::span<const uint32_t> units, uint32_t unit_count) {
  SampleGroups g;
  g.begin.assign(static_cast<size_t>(unit_count) + 1, 0);
  for (uint32_t u : units) ++g.begin[u + 1];
  std::partial_sum(g.begin.begin(), g.begin.end(), g.begin.begin());
  g.members.resize(units.size());
  std::vector<uint32_t> fill(g.begin.begin(), g.begin.end() - 1);
  for (uint32_t s = 0; s < units.size(); ++s) g.members[fill[units[s]]++] = s;
  return g;
}

Status PrepareToLoad(const Dataset& dataset) {
  STOKER_RETURN_IF_ERROR(CheckLoadable(dataset));
  return dataset.LoadLocations();
}

Status CheckLoadable(const Dataset& dataset) {
  constexpr uint64_t kMax = std::numeric_limits<uint32_t>::max();
  if (dataset.sample_count() <= kMax && dataset.file_count() <= kMax) return Status::OK();
  return Status::Unsupported(fmt::format(
      "version {} has {} samples in {} files: the loaders plan epochs for up to 2^32 - 1 of "
      "each per version (the Dataset API reads any file by its 64-bit index)",
      dataset.version(), dataset.sample_count(), dataset.file_count()));
}

std::vector<uint32_t> SampleChunks(const Dataset& dataset) {
  const dataset::VersionView& view = dataset::ViewOf(dataset);
  std::vector<uint32_t> chunks(view.sample_count());
  for (uint64_t s = 0; s < view.sample_count(); ++s) {
    chunks[s] = view.file(view.SampleFiles(s).first).chunk;
  }
  return chunks;
}

}  // namespace stoker::loader
