// A trainer rank's metadata: the shuffle units its sampler deals, and where the samples of its
// plan lie. A rank of R reads about 1/R of a dataset's locations when chunk mode deals whole
// chunks (the default): the sampler counts units from the chunk table and reads the members of
// just the chunks the rank's share lies in (ChunkStreams), the view keeps their locations and
// samples (VersionView::KeepChunkLocations), and the read pipeline finds its samples there.
// Every other case (and tar-grouped format-2 segments) reads every location once
// (PrepareToLoad).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>

#include "dataset/version_view.h"
#include "loader/sampler.h"
#include "stoker/dataset.h"

namespace stoker::loader {

// The shuffle units of `dataset` for `block_bytes` (0: whole chunks): for whole chunks, counts
// from the chunk table and members read chunk by chunk when a plan needs them; otherwise (or
// when a chunk record does not count its samples) every location is read now and the units held
// in memory. `dataset` must outlive the source.
Result<std::shared_ptr<const UnitSource>> DatasetUnits(const Dataset& dataset,
                                                       uint64_t block_bytes);

// Where the files of a plan's samples lie: the locations the view kept, when they hold every
// sample of the plan, else the whole table (read now if need be). Cheap to copy.
class PlanLocations {
 public:
  static Result<PlanLocations> For(const Dataset& dataset, std::span<const uint32_t> plan);

  // Sample s's files [first, first + count); s must be in the plan.
  std::pair<uint64_t, uint64_t> SampleFiles(uint32_t sample) const;
  const dataset::FileLocation& file(uint64_t f) const;  // a file of a sample of the plan
  int32_t label(uint32_t sample) const { return file(SampleFiles(sample).first).label; }
  bool whole_table() const { return kept_ == nullptr; }

 private:
  PlanLocations(const dataset::VersionView* view,
                std::shared_ptr<const dataset::KeptLocations> kept)
      : view_(view), kept_(std::move(kept)) {}
  const dataset::VersionView* view_;
  std::shared_ptr<const dataset::KeptLocations> kept_;  // null: the view's whole table
};

}  // namespace stoker::loader
