#include "loader/rank_metadata.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include "loader/shuffle_unit.h"

namespace stoker::loader {
namespace {

// Whole chunks of a version whose samples are its files: sample s is file s, chunk c holds its
// entry count of them.
class ChunkUnits final : public UnitSource {
 public:
  static Result<std::shared_ptr<const UnitSource>> Create(const Dataset& dataset) {
    const dataset::VersionView& view = dataset.view();
    std::vector<uint32_t> counts(view.chunk_count());
    for (uint32_t c = 0; c < view.chunk_count(); ++c) {
      STOKER_ASSIGN_OR_RETURN(const dataset::ChunkRef chunk, view.chunk(c));
      counts[c] = chunk.entry_count;
    }
    return std::shared_ptr<const UnitSource>(new ChunkUnits(dataset, std::move(counts)));
  }

  std::span<const uint32_t> counts() const override { return counts_; }

  Status Prepare(std::span<const uint32_t> units) const override {
    const dataset::VersionView& view = dataset_.view();
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
    std::vector<uint32_t> samples;
    auto collect = [&](std::span<const std::pair<uint64_t, dataset::FileLocation>> files) {
      samples.reserve(files.size());
      for (const auto& f : files) samples.push_back(static_cast<uint32_t>(f.first));
      std::sort(samples.begin(), samples.end());
    };
    const auto kept = dataset_.view().kept_locations();
    if (auto kept_files = kept ? kept->ChunkFiles(unit) : std::nullopt) {
      collect(*kept_files);
    } else {  // kept for another plan meanwhile: read again
      STOKER_ASSIGN_OR_RETURN(const auto files, dataset_.view().ChunkFiles(unit));
      collect(files);
    }
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
  if (block_bytes == 0 && !dataset.view().grouped()) {
    return ChunkUnits::Create(dataset);
  }
  STOKER_RETURN_IF_ERROR(PrepareToLoad(dataset));
  return UnitsInMemory(SampleUnits(dataset, block_bytes));
}

Result<PlanLocations> PlanLocations::For(const Dataset& dataset, std::span<const uint32_t> plan) {
  STOKER_RETURN_IF_ERROR(CheckLoadable(dataset));
  const dataset::VersionView& view = dataset.view();
  if (!view.has_locations() && !view.grouped()) {
    auto kept = view.kept_locations();
    if (kept && std::all_of(plan.begin(), plan.end(),
                            [&](uint32_t s) { return kept->Find(s) != nullptr; })) {
      return PlanLocations(&view, std::move(kept));
    }
  }
  STOKER_RETURN_IF_ERROR(PrepareToLoad(dataset));
  return PlanLocations(&view, nullptr);
}

std::pair<uint64_t, uint64_t> PlanLocations::SampleFiles(uint32_t sample) const {
  if (kept_) return {sample, 1};  // kept only for versions whose samples are their files
  return view_->SampleFiles(sample);
}

const dataset::FileLocation& PlanLocations::file(uint64_t f) const {
  if (kept_) return *kept_->Find(f);
  return view_->file(f);
}

}  // namespace stoker::loader
