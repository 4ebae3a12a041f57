// stoker._core.ReadPipeline: reads a plan of samples ahead of the consumer with the C++ read
// pipeline (src/loader/read_pipeline.h: coalesced range reads on io_uring or a pread pool, CRC
// checks, a hard memory budget) and yields what ds[i] yields, in plan order.
//
//   for data, label, path in ReadPipeline(ds, plan, memory_budget=1 << 30): ...
//
// Next() waits with the GIL released. A sample that failed (bad CRC, read error) raises the
// matching exception (stoker.CorruptionError names the file) when it is reached.
#include "pipeline.h"

#include <Python.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include "dataset.h"
#include "errors.h"
#include "loader/read_pipeline.h"
#include "stoker/dataset.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

class PyPipeline {
 public:
  using Plan = nb::ndarray<const uint32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

  // `plan`: any buffer of uint32 (the memoryviews Sampler.plan_rank returns, numpy arrays).
  PyPipeline(nb::object dataset, const Plan& plan_view, uint64_t memory_budget, uint32_t io_depth,
             const std::string& engine)
      : dataset_obj_(std::move(dataset)) {
    std::vector<uint32_t> plan(plan_view.data(), plan_view.data() + plan_view.shape(0));
    const Dataset& ds = UnwrapDataset(dataset_obj_);
    // The Python Dataset object owns the C++ one; holding dataset_obj_ keeps it alive.
    std::shared_ptr<const Dataset> shared(&ds, [](const Dataset*) {});
    loader::ReadPipelineOptions options;
    options.memory_budget_bytes = memory_budget;
    options.io_depth = io_depth;
    if (engine == "threads") {
      options.engine = loader::IoEngineKind::kThreads;
    } else if (engine == "io_uring") {
      options.engine = loader::IoEngineKind::kUring;
    } else if (engine != "auto") {
      throw nb::value_error("engine must be 'auto', 'io_uring' or 'threads'");
    }
    Result<std::unique_ptr<loader::ReadPipeline>> started = Err(Status::Internal("unset"));
    {
      nb::gil_scoped_release release;
      started = loader::ReadPipeline::Start(std::move(shared), std::move(plan), options);
    }
    pipeline_ = ValueOrThrow(std::move(started));
  }

  nb::object Next() {
    if (!pipeline_) throw nb::stop_iteration();
    Result<std::optional<loader::SampleData>> item = Err(Status::Internal("unset"));
    {
      nb::gil_scoped_release release;
      item = pipeline_->Next();
    }
    std::optional<loader::SampleData> sample = ValueOrThrow(std::move(item));
    if (!sample) throw nb::stop_iteration();
    ThrowIfError(sample->status);
    const Dataset& ds = UnwrapDataset(dataset_obj_);
    if (sample->files.empty()) throw nb::index_error("a delivered sample without files");  // a bug
    return SampleValue(
        ds, sample->files.front().index, sample->files.size(), sample->label, [&](uint64_t file) {
          for (const auto& f : sample->files) {
            if (f.index == file) {
              return nb::bytes(reinterpret_cast<const char*>(f.bytes.data()), f.bytes.size());
            }
          }
          throw nb::index_error("file missing from a delivered sample");  // a bug, not bad data
        });
  }

  nb::dict Stats() const {
    nb::dict d;
    if (!pipeline_) return d;
    const loader::ReadPipelineStats s = pipeline_->stats();
    d["samples"] = s.samples;
    d["ranges"] = s.ranges;
    d["bytes_read"] = s.bytes_read;
    d["payload_bytes"] = s.payload_bytes;
    d["consumer_waits"] = s.consumer_waits;
    d["consumer_wait_seconds"] = s.consumer_wait_seconds;
    d["peak_bytes_held"] = s.peak_bytes_held;
    d["engine"] = std::string(pipeline_->engine_name());
    AddNodeStats(UnwrapDataset(dataset_obj_), d);
    return d;
  }

  double WaitSeconds() const { return pipeline_ ? pipeline_->stats().consumer_wait_seconds : 0; }

  void Close() {
    nb::gil_scoped_release release;
    pipeline_.reset();
  }

 private:
  nb::object dataset_obj_;
  std::unique_ptr<loader::ReadPipeline> pipeline_;
};

}  // namespace

void RegisterPipeline(nb::module_& m) {
  nb::class_<PyPipeline>(m, "ReadPipeline",
                         "Reads `plan` (sample indices) ahead of the consumer with coalesced, "
                         "CRC-checked range reads under a memory budget; iterating yields what "
                         "ds[i] yields, in plan order.")
      .def(nb::init<nb::object, PyPipeline::Plan, uint64_t, uint32_t, const std::string&>(),
           nb::arg("dataset"), nb::arg("plan"), nb::arg("memory_budget") = uint64_t{1} << 30,
           nb::arg("io_depth") = 8, nb::arg("engine") = "auto")
      .def("__iter__", [](nb::handle self) { return self; })
      .def("__next__", &PyPipeline::Next)
      .def("stats", &PyPipeline::Stats,
           "Counters: samples, ranges, bytes_read, payload_bytes, consumer_waits, "
           "consumer_wait_seconds (time spent waiting for data), peak_bytes_held, engine.")
      .def_prop_ro("wait_seconds", &PyPipeline::WaitSeconds,
                   "Seconds __next__ has waited for data so far (consumer_wait_seconds).")
      .def("close", &PyPipeline::Close, "Stops reading ahead and frees the buffers.");
}

}  // namespace stoker::python
