#include "loader/sampler.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include <fmt/format.h>

#include "common/random.h"
#include "dataset/version_view.h"
#include "stoker/dataset.h"

namespace stoker::loader {
namespace {

constexpr uint64_t kSaltChunks = 1;   // generator for the chunk permutation
constexpr uint64_t kSaltSamples = 2;  // generator for sample permutations

// Shuffles each run of `window` consecutive chunks' samples and appends them to `out`.
void AppendWindows(std::span<const uint32_t> chunks, uint32_t window,
                   const std::vector<uint32_t>& chunk_begin,
                   const std::vector<uint32_t>& samples_by_chunk, Pcg32& rng,
                   std::vector<uint32_t>* out) {
  for (size_t w = 0; w < chunks.size(); w += window) {
    const size_t start = out->size();
    for (size_t c = w; c < std::min(chunks.size(), w + window); ++c) {
      out->insert(out->end(), samples_by_chunk.begin() + chunk_begin[chunks[c]],
                  samples_by_chunk.begin() + chunk_begin[chunks[c] + 1]);
    }
    Shuffle(std::span<uint32_t>(out->data() + start, out->size() - start), rng);
  }
}

}  // namespace

std::string_view ShuffleModeName(ShuffleMode mode) {
  switch (mode) {
    case ShuffleMode::kSequential: return "sequential";
    case ShuffleMode::kFull: return "full";
    case ShuffleMode::kChunk: return "chunk";
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

Result<Sampler> Sampler::Create(std::vector<uint32_t> sample_chunks, uint64_t dataset_version,
                                const SamplerOptions& options) {
  STOKER_RETURN_IF_ERROR(options.Validate());
  return Sampler(std::move(sample_chunks), dataset_version, options);
}

std::vector<uint32_t> Sampler::ChunkOrder(uint64_t epoch, uint32_t) const {
  std::vector<uint32_t> chunks(sample_chunks_.begin(), sample_chunks_.end());
  std::sort(chunks.begin(), chunks.end());
  chunks.erase(std::unique(chunks.begin(), chunks.end()), chunks.end());
  Pcg32 rng(EpochSeed(options_.seed, epoch, version_, kSaltChunks));
  Shuffle(std::span<uint32_t>(chunks), rng);
  return chunks;
}

std::vector<uint32_t> Sampler::GlobalOrder(uint64_t epoch, uint32_t world_size) const {
  const uint32_t n = sample_count();
  std::vector<uint32_t> order;
  order.reserve(n);
  if (options_.mode == ShuffleMode::kFull) {
    order.resize(n);
    std::iota(order.begin(), order.end(), 0u);
    Pcg32 rng(EpochSeed(options_.seed, epoch, version_, kSaltSamples));
    Shuffle(std::span<uint32_t>(order), rng);
    return order;
  }

  // Samples grouped by chunk (CSR), in storage order within a chunk.
  const uint32_t max_chunk =
      n == 0 ? 0 : *std::max_element(sample_chunks_.begin(), sample_chunks_.end());
  SampleGroups groups = GroupByUnit(sample_chunks_, max_chunk + 1);
  const std::vector<uint32_t>& chunk_begin = groups.begin;

  if (options_.mode == ShuffleMode::kSequential) {
    // Storage order, chunk after chunk: with files placed in chunks in a mixed order, index
    // order would read every chunk a little at a time.
    return std::move(groups.members);
  }
  const std::vector<uint32_t> chunks = ChunkOrder(epoch, world_size);
  Pcg32 rng(EpochSeed(options_.seed, epoch, version_, kSaltSamples));
  const uint32_t ranks = std::max(1u, world_size);
  if (ranks == 1) {
    AppendWindows(chunks, options_.window_chunks, chunk_begin, groups.members, rng, &order);
    return order;
  }

  // Deal chunks to per-rank streams, each next chunk to the stream with the fewest samples, so
  // every rank reads whole chunks of its own.
  std::vector<std::vector<uint32_t>> rank_chunks(ranks);
  std::vector<uint64_t> load(ranks, 0);
  for (uint32_t c : chunks) {
    const auto r = static_cast<uint32_t>(std::min_element(load.begin(), load.end()) - load.begin());
    rank_chunks[r].push_back(c);
    load[r] += chunk_begin[c + 1] - chunk_begin[c];
  }
  std::vector<std::vector<uint32_t>> streams(ranks);
  for (uint32_t r = 0; r < ranks; ++r) {
    AppendWindows(rank_chunks[r], options_.window_chunks, chunk_begin, groups.members, rng,
                  &streams[r]);
  }
  // Even out the streams (rank r gets n/R, plus one for r < n mod R) by moving the tails of
  // long streams to short ones: a handful of samples, the only ones read outside their rank's
  // own chunks.
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
  // Interleave: G[i·R + r] = stream_r[i].
  order.resize(n);
  for (uint32_t r = 0; r < ranks; ++r) {
    for (size_t i = 0; i < streams[r].size(); ++i) order[i * ranks + r] = streams[r][i];
  }
  return order;
}

Sampler::RankPlan Sampler::PlanRank(const SamplerState& state, uint32_t world_size,
                                    uint32_t rank) const {
  RankPlan plan;
  const uint64_t n = sample_count();
  const uint32_t ranks = std::max(1u, world_size);
  if (n == 0 || rank >= ranks) return plan;
  const std::vector<uint32_t> order = GlobalOrder(state.epoch, state.planned_world_size);
  const uint64_t start = std::min<uint64_t>(state.position, n);
  const uint64_t remaining = n - start;
  const uint64_t per_rank = options_.drop_last ? remaining / ranks : (remaining + ranks - 1) / ranks;
  plan.dropped = options_.drop_last ? remaining - per_rank * ranks : 0;
  plan.samples.reserve(per_rank);
  for (uint64_t i = 0; i < per_rank; ++i) {
    const uint64_t q = start + i * ranks + rank;
    if (q < n) {
      plan.samples.push_back(order[q]);
    } else {
      plan.samples.push_back(order[(q - n) % n]);  // fill the last round from the start of G
      ++plan.padded;
    }
  }
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
  constexpr uint64_t kMax = std::numeric_limits<uint32_t>::max();
  if (dataset.sample_count() <= kMax && dataset.file_count() <= kMax) {
    return dataset.LoadLocations();
  }
  return Status::Unsupported(fmt::format(
      "version {} has {} samples in {} files: the loaders plan epochs for up to 2^32 - 1 of "
      "each per version (the Dataset API reads any file by its 64-bit index)",
      dataset.version(), dataset.sample_count(), dataset.file_count()));
}

std::vector<uint32_t> SampleChunks(const Dataset& dataset) {
  const dataset::VersionView& view = dataset.view();
  std::vector<uint32_t> chunks(view.sample_count());
  for (uint64_t s = 0; s < view.sample_count(); ++s) {
    chunks[s] = view.file(view.SampleFiles(s).first).chunk;
  }
  return chunks;
}

SamplerState Sampler::Advance(const SamplerState& from, uint32_t world_size,
                              uint64_t samples_per_rank) {
  SamplerState next = from;
  next.position += samples_per_rank * std::max(1u, world_size);
  return next;
}

}  // namespace stoker::loader
