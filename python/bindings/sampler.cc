// stoker._core.Sampler: the C++ sampler (src/loader/sampler.h, docs/sampler.md) behind
// stoker.Loader and stoker.torch. It only decides orders; reading stays with stoker.Dataset.
//
//   s = Sampler(ds, mode="chunk", seed=0, window=16, drop_last=False)
//   g = s.global_order(epoch, world_size)                       # memoryview of uint32
//   plan, padded, dropped = s.plan_rank(epoch, position, planned_world_size, world_size, rank)
//
// Orders come back as read-only uint32 memoryviews over C++-owned vectors: no per-element Python
// objects for million-sample epochs, and np.asarray() views them without a copy (numpy is not a
// dependency). Every computation runs with the GIL released.
#include "sampler.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "dataset.h"
#include "errors.h"
#include "loader/epoch_cursor.h"
#include "loader/sampler.h"
#include "loader/shuffle_report.h"
#include "loader/shuffle_unit.h"
#include "stoker/dataset.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

using loader::Sampler;
using Order = nb::ndarray<nb::memview, const uint32_t, nb::ndim<1>>;

// Hands `samples` to Python without copying: the memoryview owns the vector.
Order ToMemoryview(std::vector<uint32_t>&& samples) {
  auto* owned = new std::vector<uint32_t>(std::move(samples));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<uint32_t>*>(p); });
  const size_t shape[1] = {owned->size()};
  return {owned->data(), 1, shape, owner};
}

loader::SamplerOptions MakeOptions(const std::string& mode, uint64_t seed, uint32_t window,
                                   bool drop_last) {
  loader::SamplerOptions options;
  options.mode = ValueOrThrow(loader::ParseShuffleMode(mode));
  options.seed = seed;
  options.window_chunks = window;
  options.drop_last = drop_last;
  return options;
}

Sampler CreateSampler(std::vector<uint32_t> sample_chunks, uint64_t version,
                      const loader::SamplerOptions& options) {
  Result<Sampler> sampler = Err(Status::Internal("unset"));
  {
    nb::gil_scoped_release release;
    sampler = Sampler::Create(std::move(sample_chunks), version, options);
  }
  return ValueOrThrow(std::move(sampler));
}

void CheckWorld(uint32_t world_size, uint32_t rank) {
  if (world_size == 0) ThrowStatus(Status::InvalidArgument("world_size must be at least 1"));
  if (rank >= world_size) {
    ThrowStatus(Status::InvalidArgument("rank " + std::to_string(rank) +
                                        " out of range for world_size " +
                                        std::to_string(world_size)));
  }
}

}  // namespace

void RegisterSampler(nb::module_& m) {
  nb::class_<Sampler>(m, "Sampler",
                      "Which samples each rank reads, in which order, every epoch "
                      "(docs/sampler.md). Immutable; orders are uint32 memoryviews.")
      .def(
          "__init__",
          [](Sampler* self, nb::handle dataset, const std::string& mode, uint64_t seed,
             uint32_t window, bool drop_last, uint64_t block_size) {
            const loader::SamplerOptions options = MakeOptions(mode, seed, window, drop_last);
            const Dataset& ds = UnwrapDataset(dataset);
            ThrowIfError(loader::ValidateBlockSize(ds, block_size));
            Result<Sampler> sampler = Err(Status::Internal("unset"));
            {
              nb::gil_scoped_release release;
              sampler = loader::CreateSampler(ds, options, block_size);
            }
            new (self) Sampler(ValueOrThrow(std::move(sampler)));
          },
          // The sampler reads the dataset's metadata as plans need it: keep it alive.
          nb::keep_alive<1, 2>(), nb::arg("dataset"), nb::kw_only(), nb::arg("mode") = "chunk",
          nb::arg("seed") = 0, nb::arg("window") = 16, nb::arg("drop_last") = false,
          nb::arg("block_size") = 0,
          "A sampler over a stoker.Dataset's samples. mode: 'sequential', 'full' or 'chunk'; "
          "window: chunks per shuffle window (chunk mode); block_size: the shuffle unit in "
          "bytes (blocks of a chunk, docs/sampler.md), 0 for whole chunks. The window then "
          "holds W chunks' worth of blocks (the `window` property counts units).")
      .def_static(
          "from_chunks",
          [](std::vector<uint32_t> sample_chunks, uint64_t dataset_version, const std::string& mode,
             uint64_t seed, uint32_t window, bool drop_last) {
            return CreateSampler(std::move(sample_chunks), dataset_version,
                                 MakeOptions(mode, seed, window, drop_last));
          },
          nb::arg("sample_chunks"), nb::arg("dataset_version"), nb::kw_only(),
          nb::arg("mode") = "chunk", nb::arg("seed") = 0, nb::arg("window") = 16,
          nb::arg("drop_last") = false,
          "A sampler over synthetic samples: sample_chunks[s] is sample s's chunk.")
      .def_prop_ro("num_samples", &Sampler::sample_count)
      .def_prop_ro(
          "mode",
          [](const Sampler& s) { return std::string(loader::ShuffleModeName(s.options().mode)); })
      .def_prop_ro("seed", [](const Sampler& s) { return s.options().seed; })
      .def_prop_ro("window", [](const Sampler& s) { return s.options().window_chunks; })
      .def_prop_ro("drop_last", [](const Sampler& s) { return s.options().drop_last; })
      .def(
          "global_order",
          [](const Sampler& s, uint64_t epoch, uint32_t world_size) {
            CheckWorld(world_size, 0);
            Result<std::vector<uint32_t>> order = Err(Status::Internal("unset"));
            {
              nb::gil_scoped_release release;
              order = s.GlobalOrder(epoch, world_size);
            }
            return ToMemoryview(ValueOrThrow(std::move(order)));
          },
          nb::arg("epoch"), nb::arg("world_size") = 1,
          "The epoch's global order G, planned for world_size ranks: a permutation of "
          "range(num_samples).")
      .def(
          "plan_rank",
          [](const Sampler& s, uint64_t epoch, uint64_t position, uint32_t planned_world_size,
             uint32_t world_size, uint32_t rank) {
            CheckWorld(planned_world_size, 0);
            CheckWorld(world_size, rank);
            Result<Sampler::RankPlan> planned = Err(Status::Internal("unset"));
            {
              nb::gil_scoped_release release;
              planned = s.PlanRank({epoch, position, planned_world_size}, world_size, rank);
            }
            Sampler::RankPlan plan = ValueOrThrow(std::move(planned));
            return nb::make_tuple(ToMemoryview(std::move(plan.samples)), plan.padded, plan.dropped);
          },
          nb::arg("epoch"), nb::arg("position"), nb::arg("planned_world_size"),
          nb::arg("world_size"), nb::arg("rank"),
          "What `rank` of `world_size` reads from `position` of the epoch's order (built for "
          "planned_world_size ranks) to the epoch's end: (samples, padded, dropped).");

  m.def(
      "sample_chunks",
      [](nb::handle dataset) {
        const Dataset& ds = UnwrapDataset(dataset);
        std::vector<uint32_t> chunks;
        Status loaded;
        {
          nb::gil_scoped_release release;
          // Every file's location (32 bytes per file), read once per process.
          loaded = ds.LoadLocations();
          if (loaded.ok()) chunks = loader::SampleChunks(ds);
        }
        ThrowIfError(loaded);
        return ToMemoryview(std::move(chunks));
      },
      nb::arg("dataset"),
      "The chunk of each sample's first file (uint32 memoryview): what Sampler.from_chunks "
      "takes, for a subset of the samples (stoker.Dataset.subset). Reads every file's "
      "location once.");

  m.def(
      "shuffle_unit",
      [](nb::handle dataset, uint32_t window, uint32_t batch_size,
         std::optional<uint64_t> block_size) {
        const Dataset& ds = UnwrapDataset(dataset);
        if (window == 0)
          ThrowStatus(Status::InvalidArgument("window must hold at least one chunk"));
        if (batch_size == 0) ThrowStatus(Status::InvalidArgument("batch_size must be at least 1"));
        if (block_size) ThrowIfError(loader::ValidateBlockSize(ds, *block_size));
        Result<loader::ShuffleUnit> chosen = Err(Status::Internal("unset"));
        {
          nb::gil_scoped_release release;
          chosen = block_size ? loader::FixedShuffleUnit(ds, window, batch_size, *block_size)
                              : loader::ChooseShuffleUnit(ds, window, batch_size);
        }
        const loader::ShuffleUnit unit = ValueOrThrow(std::move(chosen));
        auto estimate = [](const loader::MixingEstimate& e) {
          nb::dict d;
          d["labelled"] = e.labelled;
          d["classes"] = e.classes;
          d["classes_per_batch"] = e.classes_per_batch;
          d["full_classes_per_batch"] = e.full_classes_per_batch;
          return d;
        };
        nb::dict d;
        d["block_size"] = unit.block_bytes;
        d["units_per_window"] = unit.units_per_window;
        d["mixes_well"] = unit.mixes_well;
        d["target"] = loader::kMixingTarget;
        d["whole_chunks"] = estimate(unit.whole_chunks);
        d["chosen"] = estimate(unit.chosen);
        return d;
      },
      nb::arg("dataset"), nb::arg("window") = 16, nb::arg("batch_size") = 256,
      nb::arg("block_size") = nb::none(),
      "The shuffle unit chunk mode uses on `dataset` (docs/sampler.md): with block_size None, "
      "whole chunks when they mix classes within `target` of a full shuffle, else the largest "
      "block of a chunk that does; with an int, that block size (0: whole chunks). Returns "
      "{block_size, units_per_window, mixes_well, target, whole_chunks, chosen}, the last two "
      "with the expected distinct classes per batch and a full shuffle's.");

  m.def(
      "shuffle_report",
      [](nb::handle dataset, uint32_t batch_size, std::vector<uint32_t> windows, uint64_t seed,
         uint64_t epoch, uint32_t default_window) {
        const Dataset& ds = UnwrapDataset(dataset);
        if (batch_size == 0 || default_window == 0) {
          ThrowStatus(Status::InvalidArgument("batch_size and default_window must be positive"));
        }
        loader::ShuffleReportOptions options;
        options.batch_size = batch_size;
        options.windows = std::move(windows);
        options.default_window = default_window;
        options.seed = seed;
        options.epoch = epoch;
        Result<std::vector<loader::OrderMetrics>> rows = Err(Status::Internal("unset"));
        {
          nb::gil_scoped_release release;
          rows = loader::ShuffleReport(ds, options);
        }
        nb::list out;
        for (const auto& r : ValueOrThrow(std::move(rows))) {
          nb::dict row;
          row["mode"] = std::string(loader::ShuffleModeName(r.mode));
          row["window"] = r.window_chunks;
          row["batch_label_entropy_bits"] = r.batch_label_entropy_bits;
          row["batch_distinct_classes"] = r.batch_distinct_classes;
          row["mean_displacement"] = r.mean_displacement;
          row["storage_order_correlation"] = r.storage_order_correlation;
          row["same_chunk_neighbours"] = r.same_chunk_neighbours;
          row["window_bytes"] = r.window_bytes;
          row["reads_per_epoch"] = r.reads_per_epoch;
          row["mean_read_bytes"] = r.mean_read_bytes;
          row["loader_default"] = r.loader_default;
          if (r.loader_default) {
            row["block_bytes"] = r.block_bytes;
            row["expected_classes_per_batch"] = r.expected_classes;
            row["expected_full_shuffle_classes_per_batch"] = r.expected_full_classes;
          }
          out.append(row);
        }
        return out;
      },
      nb::arg("dataset"), nb::arg("batch_size") = 256,
      nb::arg("windows") = std::vector<uint32_t>{1, 4, 16, 64}, nb::arg("seed") = 0,
      nb::arg("epoch") = 0, nb::arg("default_window") = 16,
      "How random each order is on `dataset` (a stoker.Dataset): one dict per order — "
      "sequential, full, chunk mode per window (whole chunks), then the loader's default "
      "(loader_default: chunk mode, window default_window, the shuffle unit stoker.Loader "
      "picks: block_bytes, expected classes per batch vs a full shuffle's) — with per-batch "
      "label entropy (bits; NaN without labels) and distinct classes, mean displacement, rank "
      "correlation with storage order, the fraction of same-chunk neighbours, the window's "
      "memory, and reads per epoch with their mean size. See `stoker shuffle-report`.");

  using loader::EpochCursor;
  nb::class_<EpochCursor>(
      m, "EpochCursor",
      "Where one rank's reading stands in its epochs (src/loader/epoch_cursor.h): the loaders "
      "count what they yield with the token of the pass they run in; it moves the epoch and "
      "position on a pass's start and end, set_epoch and load.")
      .def(nb::init<uint64_t, uint32_t, bool>(), nb::arg("num_samples"), nb::arg("world_size"),
           nb::arg("drop_last"))
      .def_prop_ro("epoch", &EpochCursor::epoch)
      .def_prop_ro("position", &EpochCursor::position)
      .def_prop_ro("planned_world_size", &EpochCursor::planned_world_size)
      .def_prop_ro("yielded", &EpochCursor::yielded)
      .def_prop_ro("pass_token", &EpochCursor::pass)
      .def(
          "set_epoch", [](EpochCursor& c, int64_t epoch) { ThrowIfError(c.SetEpoch(epoch)); },
          nb::arg("epoch"))
      .def("begin_pass", &EpochCursor::BeginPass, "Starts a pass; returns its token.")
      .def("end_pass", &EpochCursor::EndPass, nb::arg("token"))
      .def("add_yielded", &EpochCursor::AddYielded, nb::arg("token"), nb::arg("count"))
      .def("set_yielded", &EpochCursor::SetYielded, nb::arg("count"))
      .def("consumed_position", &EpochCursor::ConsumedPosition, nb::arg("consumed"))
      .def("pass_samples", &EpochCursor::PassSamples)
      .def(
          "load",
          [](EpochCursor& c, int64_t epoch, int64_t position, int64_t planned_world_size) {
            ThrowIfError(c.Load(epoch, position, planned_world_size));
          },
          nb::arg("epoch"), nb::arg("position"), nb::arg("planned_world_size"))
      .def("__getstate__",
           [](const EpochCursor& c) {
             const EpochCursor::State s = c.Save();
             return nb::make_tuple(s.num_samples, s.epoch, s.position, s.yielded, s.pass,
                                   s.world_size, s.planned, s.drop_last, s.explicit_epoch);
           })
      .def("__setstate__", [](EpochCursor& c, const nb::tuple& t) {
        if (t.size() != 9) ThrowStatus(Status::InvalidArgument("bad EpochCursor state"));
        EpochCursor::State s{
            nb::cast<uint64_t>(t[0]), nb::cast<uint64_t>(t[1]), nb::cast<uint64_t>(t[2]),
            nb::cast<uint64_t>(t[3]), nb::cast<uint64_t>(t[4]), nb::cast<uint32_t>(t[5]),
            nb::cast<uint32_t>(t[6]), nb::cast<bool>(t[7]),     nb::cast<bool>(t[8])};
        new (&c) EpochCursor(ValueOrThrow(EpochCursor::Restore(s)));
      });
}

}  // namespace stoker::python
