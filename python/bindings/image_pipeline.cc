// stoker._core.ImagePipeline: ready image batches from a plan, made by the C++ image pipeline
// (src/loader/image_pipeline.h: read, decode, crop/resize, flip, normalize in C++ threads).
// Batches come out as torch tensors that share the pipeline's batch buffer (DLPack, no copy);
// the buffer returns to the pipeline's pool when the tensor is freed. stoker.ImageLoader wraps
// this; see python/stoker/image_loader.py for the options.
#include "image_pipeline.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "common/threads.h"
#include "dataset.h"
#include "decode/augment.h"
#include "decode/device_batches.h"
#include "decode/maker_version.h"
#include "decode/transform_option_table.h"
#include "errors.h"
#include "loader/image_members.h"
#include "loader/image_pipeline.h"
#include "net/auth.h"
#include "net/uri.h"
#include "options.h"
#include "stoker/dataset.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

using loader::ImagePipeline;
using loader::ImagePipelineOptions;
using Plan = nb::ndarray<const uint32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Order = nb::ndarray<const uint16_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

template <typename T>
T Get(const nb::dict& options, const char* key) {
  if (!options.contains(key)) throw nb::key_error(key);
  return nb::cast<T>(options[key]);
}

// The keys stoker.ImageLoader sets besides the transform's options (the table's).
constexpr const char* kPipelineKeys[] = {
    "batch_size",  "drop_last",     "threads",    "prefetch_batches", "seed",         "epoch",
    "on_error",    "memory_budget", "io_depth",   "image_member",     "label_member", "cuda_device",
    "gpu_threads", "feeders",       "slice_size", "feeder_credits"};

const UnknownKey kUnknownImageOption = {PyExc_KeyError, "unknown image option "};
constexpr uint32_t kMaxThreads = 1024;  // as ImagePipeline's transform threads

// The options dict built by stoker.ImageLoader: its pipeline keys, and any of the transform's
// options (decode/transform_option_table.h), each converted as its kind says. An unknown key
// is an error, so that a misspelt option cannot be silently ignored.
ImagePipelineOptions ParseOptions(const nb::dict& o) {
  ImagePipelineOptions options;
  options.batch_size = Get<uint32_t>(o, "batch_size");
  options.drop_last = Get<bool>(o, "drop_last");
  options.threads = Get<uint32_t>(o, "threads");
  options.prefetch_batches = Get<uint32_t>(o, "prefetch_batches");
  options.seed = Get<uint64_t>(o, "seed");
  options.epoch = Get<uint64_t>(o, "epoch");
  const auto on_error = Get<std::string>(o, "on_error");
  if (on_error != "raise" && on_error != "skip") {
    throw nb::value_error("on_error must be 'raise' or 'skip'");
  }
  options.on_error = on_error == "raise" ? loader::ErrorPolicy::kRaise : loader::ErrorPolicy::kSkip;
  options.read.memory_budget_bytes = Get<uint64_t>(o, "memory_budget");
  options.read.io_depth = Get<uint32_t>(o, "io_depth");
  options.image_member = Get<std::string>(o, "image_member");
  options.label_member = Get<std::string>(o, "label_member");
  options.cuda_device = o.contains("cuda_device") ? nb::cast<int>(o["cuda_device"]) : -1;
  options.gpu_threads = o.contains("gpu_threads") ? nb::cast<uint32_t>(o["gpu_threads"]) : 0;
  if (o.contains("feeders")) {  // "host:port" texts; the job's secret from the environment
    loader::FeederPoolOptions& feeders = options.feeders;
    for (const std::string& text : nb::cast<std::vector<std::string>>(o["feeders"])) {
      feeders.addresses.push_back(ValueOrThrow(net::ParseServerAddress(text)));
    }
    if (!feeders.addresses.empty()) feeders.secret = ValueOrThrow(net::LoadSecretFromEnvironment());
    if (o.contains("slice_size")) feeders.slice_size = nb::cast<uint32_t>(o["slice_size"]);
    if (o.contains("feeder_credits")) feeders.credits = nb::cast<uint32_t>(o["feeder_credits"]);
  }
  SetOptions(o, kPipelineKeys, decode::TransformOptionTable(), kUnknownImageOption,
             options.transform);
  return options;
}

class PyImagePipeline {
 public:
  PyImagePipeline(nb::object dataset, const Plan& plan, const nb::dict& options_dict)
      : options_(ParseOptions(options_dict)) {
    std::vector<loader::ImageSource> sources(1);
    sources[0] = Source(std::move(dataset), plan, 0);
    Start(std::move(sources), {});
  }

  // A mix: `sources` a list of (dataset, plan, memory_budget); order[p] the source of position
  // p (see loader::ImagePipeline::Start).
  PyImagePipeline(const nb::list& sources_list, const Order& order, const nb::dict& options_dict)
      : options_(ParseOptions(options_dict)) {
    std::vector<loader::ImageSource> sources;
    sources.reserve(sources_list.size());
    for (nb::handle item : sources_list) {
      auto [dataset, plan, budget] = nb::cast<std::tuple<nb::object, Plan, uint64_t>>(item);
      sources.push_back(Source(std::move(dataset), plan, budget));
    }
    Start(std::move(sources), std::vector<uint16_t>(order.data(), order.data() + order.shape(0)));
  }

  // (images, labels, samples, consumed, errors, sources, waited, read_waited, not_images,
  // feeder_waited):
  // images a torch tensor sharing the batch buffer; errors a list of (position, sample,
  // message, source) for skipped samples, not_images the same for samples left out as no image;
  // waited the seconds Next() waited, read_waited those of them the batch's reads took,
  // feeder_waited those spent on slices feeders were making (loader::ImageBatch).
  nb::tuple Next() {
    if (!pipeline_) throw nb::stop_iteration();
    Result<std::optional<loader::ImageBatch>> item = Err(Status::Internal("unset"));
    {
      nb::gil_scoped_release release;
      item = pipeline_->Next();
    }
    std::optional<loader::ImageBatch> batch = ValueOrThrow(std::move(item));
    if (!batch) throw nb::stop_iteration();
    return nb::make_tuple(Images(*batch), Labels(batch->labels), Samples(batch->samples),
                          batch->consumed, Errors(batch->errors), Sources(batch->sources),
                          batch->waited_seconds, batch->read_waited_seconds,
                          Errors(batch->not_images, /*bare=*/true), batch->feeder_waited_seconds);
  }

  nb::dict Stats() const {
    nb::dict d;
    if (!pipeline_) return d;
    const loader::ImagePipelineStats s = pipeline_->stats();
    d["samples"] = s.samples;
    d["batches"] = s.batches;
    d["skipped"] = s.skipped;
    d["not_images"] = s.not_images;
    d["threads"] = s.threads;
    d["read_wait_seconds"] = s.read_wait_seconds;
    d["decode_seconds"] = s.decode_seconds;
    d["resize_seconds"] = s.resize_seconds;
    d["output_seconds"] = s.output_seconds;
    d["idle_seconds"] = s.idle_seconds;
    d["gpu_seconds"] = s.gpu_seconds;
    d["consumer_wait_seconds"] = s.consumer_wait_seconds;
    d["bytes_read"] = s.read.bytes_read;
    d["ranges"] = s.read.ranges;
    d["peak_bytes_held"] = s.read.peak_bytes_held;
    if (!options_.feeders.addresses.empty()) {
      d["feeder_wait_seconds"] = s.feeder_wait_seconds;
      d["local_slices"] = s.local_slices;
      d["redone_slices"] = s.redone_slices;
      d["hedged_slices"] = s.hedged_slices;
      nb::list feeders;
      for (const loader::FeederStats& f : s.feeders) {
        nb::dict one;
        one["address"] = f.address;
        one["slices"] = f.slices;
        one["samples"] = f.samples;
        one["pixel_bytes"] = f.pixel_bytes;
        one["failures"] = f.failures;
        one["late"] = f.late;
        one["seconds"] = f.seconds;
        one["in_flight"] = f.in_flight;
        one["reachable"] = f.reachable;
        feeders.append(one);
      }
      d["feeders"] = feeders;
    }
    AddNodeStats(UnwrapDataset(datasets_[0]), d);  // node counters are per process
    return d;
  }

  void Close() {
    nb::gil_scoped_release release;
    pipeline_.reset();
  }

 private:
  // The Python Dataset owns the C++ one; datasets_ keeps it alive as long as we live.
  loader::ImageSource Source(nb::object dataset, const Plan& plan, uint64_t budget) {
    const Dataset& ds = UnwrapDataset(dataset);
    // Feeders open the dataset themselves, by the URI it was opened by.
    std::string uri =
        options_.feeders.addresses.empty() ? "" : nb::cast<std::string>(dataset.attr("uri"));
    datasets_.push_back(std::move(dataset));
    return {std::shared_ptr<const Dataset>(&ds, [](const Dataset*) {}),
            std::vector<uint32_t>(plan.data(), plan.data() + plan.shape(0)), budget,
            std::move(uri)};
  }

  void Start(std::vector<loader::ImageSource> sources, std::vector<uint16_t> order) {
    Result<std::unique_ptr<ImagePipeline>> started = Err(Status::Internal("unset"));
    {
      nb::gil_scoped_release release;
      started = ImagePipeline::Start(std::move(sources), std::move(order), options_);
    }
    pipeline_ = ValueOrThrow(std::move(started));
  }

  nb::object Images(loader::ImageBatch& batch) const {
    const decode::OutputSpec& out = options_.transform.output;
    size_t shape[4] = {batch.count, 3, out.height, out.width};
    if (out.layout == decode::Layout::kNHWC) {
      shape[1] = out.height;
      shape[2] = out.width;
      shape[3] = 3;
    }
    // The capsule owns a reference to the pooled buffer: freeing the tensor recycles it.
    auto* owner = new std::shared_ptr<std::byte>(std::move(batch.images));
    nb::capsule capsule(
        owner, [](void* p) noexcept { delete static_cast<std::shared_ptr<std::byte>*>(p); });
    const nb::dlpack::dtype dtype =
        out.dtype == decode::DType::kFloat32 ? nb::dtype<float>() : nb::dtype<uint8_t>();
    // A GPU batch is a CUDA tensor over the device buffer (DLPack; the batch is complete: the
    // pipeline synchronized before handing it over).
    const bool on_gpu = batch.device >= 0;
    return nb::cast(nb::ndarray<nb::pytorch>(
        owner->get(), 4, shape, capsule, nullptr, dtype,
        on_gpu ? nb::device::cuda::value : nb::device::cpu::value, on_gpu ? batch.device : 0));
  }

  template <typename T>
  static nb::object Vector(const std::vector<T>& values) {
    auto* copy = new std::vector<T>(values);
    nb::capsule capsule(copy, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
    const size_t shape[1] = {copy->size()};
    return nb::cast(nb::ndarray<nb::pytorch, T, nb::ndim<1>>(copy->data(), 1, shape, capsule));
  }
  static nb::object Labels(const std::vector<int64_t>& labels) { return Vector(labels); }
  // torch has no uint32 tensors in older releases: widen to int64.
  static nb::object Samples(const std::vector<uint32_t>& samples) {
    return Vector(std::vector<int64_t>(samples.begin(), samples.end()));
  }
  static nb::object Sources(const std::vector<uint16_t>& sources) {
    return Vector(std::vector<int64_t>(sources.begin(), sources.end()));
  }

  // `errors` as (position, sample, message, source); the message without its code's name
  // when `bare` (samples left out as no image: not a failure).
  static nb::list Errors(const std::vector<loader::SampleError>& errors, bool bare = false) {
    nb::list list;
    for (const loader::SampleError& e : errors) {
      const std::string message = bare ? std::string(e.status.message()) : e.status.ToString();
      list.append(nb::make_tuple(e.position, e.sample, message, e.source));
    }
    return list;
  }

  std::vector<nb::object> datasets_;
  ImagePipelineOptions options_;
  std::unique_ptr<ImagePipeline> pipeline_;
};

// transform_images: encoded images (a list of bytes) through the pipeline's transform into one
// array, in `threads` threads (each its own Transformer over a contiguous run of the samples).
// What the engines' readers decode with (stoker.ray.read_images), where the samples come from
// the engine's own read task rather than from an ImagePipeline's plan.
nb::tuple TransformImages(const nb::list& samples, const nb::dict& values, const Plan& indices,
                          uint64_t seed, uint64_t epoch, uint32_t threads,
                          const std::optional<std::vector<std::string>>& paths) {
  decode::TransformOptions options;
  SetOptions(values, {}, decode::TransformOptionTable(), kUnknownImageOption, options);
  ThrowIfError(options.Validate());
  const size_t n = nb::len(samples);
  if (indices.shape(0) != n) throw nb::value_error("indices must give one index per sample");
  if (paths && paths->size() != n) throw nb::value_error("paths must give one path per sample");
  if (threads == 0 || threads > kMaxThreads) {
    throw nb::value_error(fmt::format("threads must be 1 .. {}", kMaxThreads).c_str());
  }
  const decode::OutputSpec& out = options.output;
  // Bounded first (both sides are 32-bit, so the product cannot wrap), so that sample_bytes()
  // cannot either.
  constexpr uint64_t kMaxOutputPixels = uint64_t{1} << 40;
  size_t total = 0;
  if (uint64_t{out.width} * out.height > kMaxOutputPixels ||
      __builtin_mul_overflow(out.sample_bytes(), n, &total)) {
    throw nb::value_error("the output size is too large");
  }
  const size_t sample_bytes = out.sample_bytes();
  // References held for the GIL-free part; their data pointers stay valid while they live.
  std::vector<nb::bytes> held;
  held.reserve(n);
  for (nb::handle h : samples) {
    if (!nb::isinstance<nb::bytes>(h)) throw nb::type_error("samples must be bytes");
    held.push_back(nb::borrow<nb::bytes>(h));
  }
  std::vector<std::span<const std::byte>> bytes(n);
  for (size_t i = 0; i < n; ++i) {
    bytes[i] = {reinterpret_cast<const std::byte*>(held[i].c_str()), held[i].size()};
  }
  std::unique_ptr<std::byte[]> data(new (std::nothrow) std::byte[std::max<size_t>(1, total)]);
  if (!data) throw std::bad_alloc();
  std::vector<Status> status(n);
  std::vector<uint8_t> not_image(n, 0);
  std::vector<uint8_t> run_failed(n, 0);  // its thread failed before it (out of memory)
  {
    nb::gil_scoped_release release;
    const size_t workers = std::clamp<size_t>(threads, 1, std::max<size_t>(1, n));
    // Nothing may escape a thread (std::terminate): a failure marks the rest of its share, whose
    // slots become zeros (memset cannot throw), and its Status is made after the join.
    const auto run = [&](size_t begin, size_t end) noexcept {
      size_t i = begin;
      try {
        decode::Transformer transformer(options);
        for (; i < end; ++i) {
          std::byte* slot = data.get() + i * sample_bytes;
          if (paths && loader::NotAnImage((*paths)[i], bytes[i])) {
            not_image[i] = 1;
          } else {
            status[i] = transformer.Run(bytes[i],
                                        decode::AugmentSeed(seed, epoch, indices.data()[i]), slot);
          }
          if (not_image[i] != 0 || !status[i].ok()) std::memset(slot, 0, sample_bytes);
        }
      } catch (...) {
        for (; i < end; ++i) {
          run_failed[i] = 1;
          std::memset(data.get() + i * sample_bytes, 0, sample_bytes);
        }
      }
    };
    std::vector<std::thread> pool;
    pool.reserve(workers);
    // Joins whatever started, however this block is left.
    struct JoinAll {
      std::vector<std::thread>& threads;
      ~JoinAll() {
        for (std::thread& t : threads) {
          if (t.joinable()) t.join();
        }
      }
    } join_all{pool};
    for (size_t w = 1; w < workers; ++w) {
      const size_t begin = n * w / workers, end = n * (w + 1) / workers;
      bool started = false;
      try {
        Result<std::thread> thread = StartThread([&run, begin, end] { run(begin, end); });
        if (thread) {
          pool.push_back(*std::move(thread));  // no reallocation: reserved
          started = true;
        }
      } catch (const std::bad_alloc&) {
        started = false;  // the thread's state could not be allocated: as no thread
      }
      if (!started) run(begin, end);  // no thread to spare: this one does that share too
    }
    run(0, n / workers);
  }
  nb::list failed, skipped;
  for (size_t i = 0; i < n; ++i) {
    if (run_failed[i] != 0) {
      status[i] = Status::ResourceExhausted("out of memory while decoding this batch");
    }
    if (not_image[i] != 0) skipped.append(i);
    if (!status[i].ok()) failed.append(nb::make_tuple(i, status[i].ToString()));
  }
  const bool chw = out.layout == decode::Layout::kNCHW;
  const size_t shape[4] = {n, chw ? 3 : size_t{out.height}, chw ? size_t{out.height} : out.width,
                           chw ? size_t{out.width} : 3};
  const nb::dlpack::dtype type =
      out.dtype == decode::DType::kUint8 ? nb::dtype<uint8_t>() : nb::dtype<float>();
  std::byte* raw = data.release();
  nb::capsule owner(raw, [](void* p) noexcept { delete[] static_cast<std::byte*>(p); });
  nb::ndarray<nb::numpy> array(raw, 4, shape, owner, nullptr, type);
  return nb::make_tuple(array, failed, skipped);
}

}  // namespace

void RegisterImagePipeline(nb::module_& m) {
  m.def("transform_images", &TransformImages, nb::arg("samples"), nb::arg("options"),
        nb::arg("indices"), nb::arg("seed") = 0, nb::arg("epoch") = 0, nb::arg("threads") = 1,
        nb::arg("paths") = nb::none(),
        "Decodes and transforms `samples` (a list of JPEG/PNG bytes) as stoker.ImageLoader "
        "would, with `options` (the transform's, as parse_transform_options takes them); sample "
        "i's random parameters come from (seed, epoch, indices[i]). With `paths` (the samples' "
        "file names), a file that is no image at all (no JPEG/PNG signature, no image "
        "extension: a README) is left out as ImageLoader leaves it out. Returns (array (N, ...) "
        "in the options' dtype and layout, [(i, error), ...] for the samples that failed, "
        "[i, ...] for those that are no image; their slots are zeros).");
  m.def(
      "transform_options", [] { return DescribeOptions(decode::TransformOptionTable()); },
      "The image transform's options, each a dict: name, kind (bool, unsigned, number, choice, "
      "pair, triple, size), doc, choices, default, text. stoker.ImageLoader's signature and docs "
      "are "
      "generated from it (scripts/gen_options.py).");
  m.def(
      "parse_transform_options",
      [](const nb::dict& values) {
        decode::TransformOptions options;
        SetOptions(values, {}, decode::TransformOptionTable(), kUnknownImageOption, options);
        ThrowIfError(options.Validate());  // ValueError now, not at the first batch
        return OptionValues(decode::TransformOptionTable(), options);
      },
      nb::arg("values"),
      "Every transform option's value after setting `values` (a dict of some of them) over the "
      "defaults, as the image pipeline would; TypeError / ValueError naming the option for a "
      "bad value, ValueError for a combination the transform refuses.");
  m.def(
      "image_sample_params",
      [](const nb::dict& options_dict, uint32_t width, uint32_t height, uint32_t sample) {
        const ImagePipelineOptions options = ParseOptions(options_dict);
        ThrowIfError(options.Validate());  // ValueError, as the pipeline would
        const decode::SampleParams p =
            decode::ChooseParams(options.transform, width, height,
                                 decode::AugmentSeed(options.seed, options.epoch, sample));
        nb::dict d;
        d["box"] = nb::make_tuple(p.box.x0, p.box.y0, p.box.x1, p.box.y1);
        d["clip_to_box"] = p.clip_to_box;
        d["flip"] = p.flip;
        d["angle"] = p.angle;
        d["zoom"] = p.zoom;
        return d;
      },
      nb::arg("options"), nb::arg("width"), nb::arg("height"), nb::arg("sample"),
      "The augmentation parameters sample `sample` (an image of width x height) gets under "
      "`options` (as ImagePipeline's, with 'epoch'): box (x0, y0, x1, y1) in source pixels, "
      "clip_to_box, flip, angle, zoom.");

  m.def(
      "maker_version", [] { return std::string(decode::MakerVersion()); },
      "What makes this build's pixels (stoker and its codecs' versions): a trainer and its "
      "feeders must agree on it (docs/protocol.md, \"Feeders\").");
  m.def("cuda_devices", &decode::CudaDeviceCount,
        "CUDA devices this process can use for ImagePipeline's GPU path (0 without a driver, a "
        "GPU, or a build with it).");
  m.def("built_with_cuda", &decode::BuiltWithCuda,
        "Whether this build has the GPU path (nvJPEG + CUDA; STOKER_CUDA=ON, docs/gpu.md).");

  nb::class_<PyImagePipeline>(m, "ImagePipeline",
                              "Decodes and transforms `plan` into batches in C++ threads; "
                              "iterating yields (images, labels, samples, consumed, errors, "
                              "sources, waited, read_waited, not_images).")
      .def(nb::init<nb::object, Plan, const nb::dict&>(), nb::arg("dataset"), nb::arg("plan"),
           nb::arg("options"))
      .def(nb::init<const nb::list&, Order, const nb::dict&>(), nb::arg("sources"),
           nb::arg("order"), nb::arg("options"),
           "A mix: `sources` a list of (dataset, plan, memory_budget or 0), `order` (uint16) the "
           "source of each position of the batches' sequence.")
      .def("__iter__", [](nb::handle self) { return self; })
      .def("__next__", &PyImagePipeline::Next)
      .def("stats", &PyImagePipeline::Stats,
           "Counters: samples, batches, skipped, not_images, threads, read_wait_seconds, "
           "decode_seconds, "
           "resize_seconds, output_seconds, idle_seconds, gpu_seconds, consumer_wait_seconds, "
           "bytes_read, "
           "ranges, peak_bytes_held.")
      .def("close", &PyImagePipeline::Close, "Stops the threads; delivered batches stay valid.");
}

}  // namespace stoker::python
