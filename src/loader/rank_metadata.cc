#include "loader/rank_metadata.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include "loader/shuffle_unit.h"

namespace stoker::loader {
namespace {

// Whole chunks, counted from the chunk table: a sample's unit is the chunk of its first file
// (SampleChunks), and each chunk record counts the samples that start in it.
class ChunkUnits final : public UnitSource {
 public:
  // nullptr when a chunk record does not say its samples (a tar-grouped format-2 segment).
  static Result<std::shared_ptr<const UnitSource>> Create(const Dataset& dataset) {
    const dataset::VersionView& view = dataset::ViewOf(dataset);
    std::vector<uint32_t> counts(view.chunk_count());
    for (uint32_t c = 0; c < view.chunk_count(); ++c) {
      STOKER_ASSIGN_OR_RETURN(const dataset::ChunkRef chunk, view.chunk(c));
      if (!chunk.sample_count) return std::shared_ptr<const UnitSource>();
      counts[c] = *chunk.sample_count;
    }
    return std::shared_ptr<const UnitSource>(new ChunkUnits(dataset, std::move(counts)));
  }

  std::span<const uint32_t> counts() const override { return counts_; }

  Status Prepare(std::span<const uint32_t> units) const override {
    const dataset::VersionView& view = dataset::ViewOf(dataset_);
    // Half the chunks or more (one rank, a whole order): one pass over every location is
    // cheaper than chunk by chunk, and the in-memory units serve every later plan.
    if (view.has_locations() || units.size() * 2 >= units_with_samples_) {
      std::lock_guard lock(mu_);
      if (!all_) {
        STOKER_RETURN_IF_ERROR(PrepareToLoad(dataset_));
        all_ = UnitsInMemory(SampleChunks(dataset_));
      }
      return Status::OK();
    }
    return view.KeepChunkLocations(units);
  }

  Result<std::vector<uint32_t>> Members(uint32_t unit) const override {
    {
      std::lock_guard lock(mu_);
      if (all_) return all_->Members(unit);
    }
    const dataset::VersionView& view = dataset::ViewOf(dataset_);
    const auto kept = view.kept_locations();
    std::vector<uint32_t> samples;
    if (view.grouped()) {
      std::vector<std::pair<uint64_t, dataset::FileLocation>> files;
      std::vector<dataset::SampleRef> read;
      auto starts = kept ? kept->ChunkSamples(unit) : std::nullopt;
      if (!starts) {  // kept for another plan meanwhile: read again
        STOKER_RETURN_IF_ERROR(view.ReadChunk(unit, &files, &read));
        starts = read;
      }
      for (const dataset::SampleRef& s : *starts)
        samples.push_back(static_cast<uint32_t>(s.sample));
    } else {  // sample s is file s
      std::vector<std::pair<uint64_t, dataset::FileLocation>> read;
      auto files = kept ? kept->ChunkFiles(unit) : std::nullopt;
      if (!files) {
        STOKER_ASSIGN_OR_RETURN(read, view.ChunkFiles(unit));
        files = read;
      }
      for (const auto& f : *files) samples.push_back(static_cast<uint32_t>(f.first));
    }
    std::sort(samples.begin(), samples.end());
    return samples;
  }

 private:
  ChunkUnits(const Dataset& dataset, std::vector<uint32_t> counts)
      : dataset_(dataset), counts_(std::move(counts)) {
    for (uint32_t n : counts_) units_with_samples_ += n > 0;
  }
  const Dataset& dataset_;
  std::vector<uint32_t> counts_;
  uint64_t units_with_samples_ = 0;
  mutable std::mutex mu_;
  mutable std::shared_ptr<const UnitSource> all_;  // once every location is read
};

}  // namespace

Result<std::shared_ptr<const UnitSource>> DatasetUnits(const Dataset& dataset,
                                                       uint64_t block_bytes) {
  STOKER_RETURN_IF_ERROR(CheckLoadable(dataset));
  if (block_bytes == 0) {
    STOKER_ASSIGN_OR_RETURN(auto units, ChunkUnits::Create(dataset));
    if (units) return units;
  }
  STOKER_RETURN_IF_ERROR(PrepareToLoad(dataset));
  return UnitsInMemory(SampleUnits(dataset, block_bytes));
}

Result<PlanLocations> PlanLocations::For(const Dataset& dataset, std::span<const uint32_t> plan) {
  STOKER_RETURN_IF_ERROR(CheckLoadable(dataset));
  const dataset::VersionView& view = dataset::ViewOf(dataset);
  if (!view.has_locations()) {
    auto kept = view.kept_locations();
    const auto holds = [&](uint32_t s) {
      return view.grouped() ? kept->FindSample(s) != nullptr : kept->Find(s) != nullptr;
    };
    if (kept && std::all_of(plan.begin(), plan.end(), holds)) {
      return PlanLocations(&view, std::move(kept));
    }
  }
  STOKER_RETURN_IF_ERROR(PrepareToLoad(dataset));
  return PlanLocations(&view, nullptr);
}

std::pair<uint64_t, uint64_t> PlanLocations::SampleFiles(uint32_t sample) const {
  if (!kept_) return view_->SampleFiles(sample);
  if (!view_->grouped()) return {sample, 1};
  const dataset::SampleRef* s = kept_->FindSample(sample);
  return {s->first_file, s->count};
}

const dataset::FileLocation& PlanLocations::file(uint64_t f) const {
  if (kept_) return *kept_->Find(f);
  return view_->file(f);
}

}  // namespace stoker::loader
