// The sampler: which sample each rank (and each worker of a rank) reads, in which order, in
// every epoch. Modes (docs/sampler.md):
//   sequential  storage order: chunk after chunk, ascending sample index within a chunk (for a
//               dataset packed in path order: 0, 1, ..., N-1);
//   full        a uniform random permutation of all samples;
//   chunk       chunks in random order, grouped into windows of W chunks, samples shuffled
//               within each window — large sequential reads, order still well mixed.
//
// Determinism: an epoch's order depends only on (seed, epoch, dataset version, mode, W, the
// number of ranks the epoch was planned for) and uses stoker's own PRNG (Pcg32) and shuffle, so
// it is identical on every machine and library version; golden-value tests pin it.
//
// Distribution: the epoch's global order G is consumed round-robin — position p goes to rank
// p mod R — so after every rank has taken i samples exactly G[0, i·R) has been consumed. That
// makes the resume state a single position, valid for any new R or worker count. In chunk mode G
// is built by interleaving per-rank streams so that each rank reads whole chunks of its own.
//
// Epoch ends (DDP-safe): every rank yields the same count. With drop_last = false (default) the
// last round is padded with samples from the start of G (each padded sample is one extra read,
// reported in padded()); with drop_last = true the final N mod R samples are skipped (reported
// in dropped()).
//
// Thread-safety: a Sampler is immutable after construction; methods may be called concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "stoker/status.h"

namespace stoker {
class Dataset;
}

namespace stoker::loader {

class ChunkStreams;

enum class ShuffleMode : uint8_t { kSequential = 0, kFull = 1, kChunk = 2 };

std::string_view ShuffleModeName(ShuffleMode mode);
Result<ShuffleMode> ParseShuffleMode(std::string_view name);

struct SamplerOptions {
  ShuffleMode mode = ShuffleMode::kChunk;
  uint64_t seed = 0;
  uint32_t window_chunks = 16;  // W, chunk mode only
  bool drop_last = false;
  Status Validate() const;
};

// Where a job is in an epoch: everything needed to continue it exactly, with any world size.
struct SamplerState {
  uint64_t epoch = 0;
  uint64_t position = 0;            // samples of the epoch's global order already consumed
  uint32_t planned_world_size = 1;  // the R the epoch's order was built for
};

// The samples of each shuffle unit (a chunk, or a block of one: shuffle_unit.h): how many,
// always at hand, and which, perhaps read from the dataset's metadata only when a plan needs
// them (rank_metadata.h). Implementations are thread-safe.
class UnitSource {
 public:
  virtual ~UnitSource() = default;
  // Samples per unit; units with none take no part in any order.
  virtual std::span<const uint32_t> counts() const = 0;
  // Called with every unit a plan will ask Members() for (ascending) before it asks: a source
  // that reads metadata reads theirs here, in one pass.
  virtual Status Prepare(std::span<const uint32_t> units) const = 0;
  // The unit's samples, ascending.
  virtual Result<std::vector<uint32_t>> Members(uint32_t unit) const = 0;
};

// Units given as each sample's unit (`sample_units[s]`), held in memory (8 bytes per sample).
std::shared_ptr<const UnitSource> UnitsInMemory(std::vector<uint32_t> sample_units);

class Sampler {
 public:
  // `sample_units[s]`: the unit (chunk) holding sample s (only used by chunk and sequential
  // mode).
  static Result<Sampler> Create(std::vector<uint32_t> sample_units, uint64_t dataset_version,
                                const SamplerOptions& options);
  // Over a source of units (at most 2^32 - 1 samples in all).
  static Result<Sampler> Create(std::shared_ptr<const UnitSource> units, uint64_t dataset_version,
                                const SamplerOptions& options);

  uint32_t sample_count() const { return sample_count_; }
  const SamplerOptions& options() const { return options_; }

  // The epoch's global order G (a permutation of all samples), planned for `world_size` ranks.
  // Reads the members of every unit (chunk and sequential mode).
  Result<std::vector<uint32_t>> GlobalOrder(uint64_t epoch, uint32_t world_size) const;

  // What rank `rank` of `world_size` reads from `state` to the end of the epoch, in order.
  // state.planned_world_size says how G was built; when it differs from world_size (an elastic
  // resume) the rest of G is simply re-dealt round-robin over the new ranks.
  // In chunk mode, with the world the epoch was planned for and a position at a round's start
  // (every plan but an elastic or mid-round resume), only the units the rank's share lies in
  // are read (ChunkStreams); otherwise G is built whole.
  struct RankPlan {
    std::vector<uint32_t> samples;  // in reading order
    uint64_t padded = 0;            // how many of them are repeats that fill the last round
    uint64_t dropped = 0;           // samples of the epoch no rank reads (drop_last)
  };
  Result<RankPlan> PlanRank(const SamplerState& state, uint32_t world_size, uint32_t rank) const;

 private:
  Sampler(std::shared_ptr<const UnitSource> units, uint32_t sample_count, uint64_t dataset_version,
          SamplerOptions options)
      : units_(std::move(units)),
        sample_count_(sample_count),
        version_(dataset_version),
        options_(options) {}
  // The members of all units with samples, unit after unit (storage order).
  Result<std::vector<uint32_t>> AllMembers() const;
  // Reads and shuffles the windows `streams` wants, for `epoch`.
  Status Materialize(ChunkStreams& streams, uint64_t epoch) const;

  std::shared_ptr<const UnitSource> units_;
  uint32_t sample_count_;
  uint64_t version_;
  SamplerOptions options_;
};

// Samples grouped by unit (CSR, ascending sample index within a unit): unit u's samples are
// members[begin[u] .. begin[u + 1]). `units[s]` < unit_count for every sample s.
struct SampleGroups {
  std::vector<uint32_t> begin, members;
};
SampleGroups GroupByUnit(std::span<const uint32_t> units, uint32_t unit_count);

// The loaders plan epochs with 32-bit sample and file numbers (one per sample in every plan and
// permutation): Unsupported, saying so, for a version of 2^32 or more samples or files, whose
// per-sample plans would not fit a trainer's memory anyway.
Status CheckLoadable(const Dataset& dataset);
// CheckLoadable, then every file's location is read (Dataset::LoadLocations: once, 32 bytes per
// file), which a dataset opened for lookups (read_locations off, as stoker.Dataset does) lacks:
// what a loader needs that reads samples from every chunk.
Status PrepareToLoad(const Dataset& dataset);

// The chunk holding each sample's first file, from the dataset's metadata: the `sample_chunks`
// input of Sampler::Create. O(samples), no I/O beyond the metadata already in memory.
std::vector<uint32_t> SampleChunks(const Dataset& dataset);

// The seed of one epoch's generator: SplitMix64 over (seed, epoch, version, salt), specified in
// docs/sampler.md so other implementations can reproduce an order.
uint64_t EpochSeed(uint64_t seed, uint64_t epoch, uint64_t dataset_version, uint64_t salt);

// Fisher–Yates (Durstenfeld, from the back) with Pcg32::Below: stoker's one shuffle.
template <typename T, typename Rng>
void Shuffle(std::span<T> items, Rng& rng) {
  for (size_t i = items.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(rng.Below(i));
    std::swap(items[i - 1], items[j]);
  }
}

}  // namespace stoker::loader
