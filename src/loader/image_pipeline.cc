#include "loader/image_pipeline.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "common/trace.h"
#include "dataset/version_view.h"
#include "decode/augment.h"
#include "decode/device_batches.h"
#include "loader/buffer_pool.h"
#include "loader/image_members.h"

namespace stoker::loader {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A GPU pipeline's sample between its transform thread and the GPU thread: the encoded JPEG
// with its augmentation, or (for what the GPU does not decode) the CPU path's output.
struct StagedSample {
  std::vector<std::byte> bytes;
  bool on_host = false;  // bytes are the output, to upload into the slot
  uint64_t seed = 0;
  decode::SampleParams params;
  uint64_t file = 0;  // the image's file index, to name it in an error
};

// A batch being filled: slots are written by transform threads in any order.
struct PendingBatch {
  std::shared_ptr<std::byte> buffer;
  uint32_t remaining = 0;  // slots not yet written (guarded by State::mu)
  // The dispatcher's time waiting for this batch's samples from the read pipeline: what is
  // done (guarded by State::mu), and since when it waits now (Clock ticks; 0: not waiting).
  double read_wait = 0;
  std::atomic<int64_t> read_since{0};
  // read_wait as of `now`, counting a wait under way. Called with State::mu held.
  double ReadWaitAt(Clock::time_point now) const {
    const int64_t since = read_since.load(std::memory_order_acquire);
    if (since == 0) return read_wait;
    const Clock::duration running = now.time_since_epoch() - Clock::duration(since);
    return read_wait + std::max(0.0, std::chrono::duration<double>(running).count());
  }
  std::vector<uint64_t> positions;
  std::vector<uint32_t> samples;
  std::vector<uint16_t> sources;
  std::vector<int64_t> labels;
  std::vector<Status> status;
  std::vector<uint8_t> not_image;      // per slot: left out as no image (NotAnImage)
  std::vector<StagedSample> staged;    // GPU pipelines, per slot
  bool claimed = false, made = false;  // GPU pipelines: taken by, and made by, a GPU thread
                                       // (State::mu)
};

struct Task {
  std::shared_ptr<PendingBatch> batch;
  uint32_t slot = 0;
  uint16_t source = 0;
  SampleData data;
};

// The augmentation seed of a source's samples: the loader's for source 0 (a single dataset), so
// that a sample of another source with the same index draws other crops.
uint64_t SourceSeed(uint64_t seed, uint16_t source) {
  return source == 0 ? seed : seed ^ (0x9E3779B97F4A7C15ULL * source);
}

}  // namespace

uint32_t DefaultTransformThreads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    return std::max(1, CPU_COUNT(&set));
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

Status ImagePipelineOptions::Validate() const {
  if (batch_size == 0) return Status::InvalidArgument("batch_size must be at least 1");
  if (threads > 1024) return Status::InvalidArgument("at most 1024 transform threads");
  if (cuda_device < -1) return Status::InvalidArgument("cuda_device must be -1 or a device");
  if (gpu_threads > 64) return Status::InvalidArgument("at most 64 GPU threads");
  STOKER_RETURN_IF_ERROR(read.Validate());
  return transform.Validate();
}

struct ImagePipeline::State {
  struct Source {
    std::shared_ptr<const Dataset> dataset;
    std::unique_ptr<ReadPipeline> reader;
  };
  std::vector<Source> sources;
  std::vector<uint16_t> order;  // per position, its source; empty: all from source 0
  size_t positions = 0;
  ImagePipelineOptions options;
  size_t sample_bytes = 0;
  uint32_t prefetch = 2;
  size_t task_capacity = 0;
  std::shared_ptr<BufferPool> pool;
  // options.cuda_device: one batch maker per GPU thread; gpu is the first, which also hands out
  // the buffers and moves samples within them.
  std::vector<std::unique_ptr<decode::DeviceBatchMaker>> gpus;
  decode::DeviceBatchMaker* gpu = nullptr;

  mutable std::mutex mu;
  std::condition_variable work_cv;      // transform threads: a task or the end
  std::condition_variable dispatch_cv;  // dispatcher: room for a task or a batch
  std::condition_variable batch_cv;     // consumer, GPU thread: a batch completed, or the end
  std::deque<Task> tasks;
  std::deque<std::shared_ptr<PendingBatch>> batches;  // dispatched, not yet delivered
  bool stopping = false;
  bool dispatch_done = false;
  Status fatal;  // sticky: the read pipeline failed, or a sample failed under kRaise
  ImagePipelineStats stats;

  std::thread dispatcher;
  std::vector<std::thread> workers, gpu_threads;

  // Whether the consumer can have `batch`: every slot written (and, on a GPU, the batch made).
  bool Ready(const PendingBatch& batch) const {
    return batch.remaining == 0 && (gpu == nullptr || batch.made);
  }

  void Fail(Status status) {
    std::lock_guard lock(mu);
    if (fatal.ok()) fatal = std::move(status);
    batch_cv.notify_all();
  }

  void Dispatch() {
    trace::NameThread("stoker dispatch");
    const uint32_t batch_size = options.batch_size;
    for (size_t pos = 0; pos < positions;) {
      const auto count = static_cast<uint32_t>(std::min<size_t>(batch_size, positions - pos));
      if (options.drop_last && count < batch_size) break;
      auto batch = std::make_shared<PendingBatch>();
      {
        std::unique_lock lock(mu);
        dispatch_cv.wait(lock, [&] { return stopping || batches.size() < prefetch; });
        if (stopping) return;
      }
      if (gpu != nullptr) {
        Result<std::shared_ptr<std::byte>> buffer = gpu->Acquire();
        if (!buffer) return Fail(buffer.error());
        batch->buffer = *std::move(buffer);
        batch->staged.resize(count);
      } else {
        batch->buffer = pool->Acquire();
      }
      batch->remaining = count;
      batch->positions.resize(count);
      batch->samples.resize(count);
      batch->sources.resize(count);
      batch->labels.resize(count);
      batch->status.resize(count);
      batch->not_image.resize(count);
      {
        std::lock_guard lock(mu);
        batches.push_back(batch);
      }
      for (uint32_t slot = 0; slot < count; ++slot) {
        const uint16_t source = order.empty() ? 0 : order[pos + slot];
        const Clock::time_point start = Clock::now();
        batch->read_since.store(start.time_since_epoch().count(), std::memory_order_release);
        const uint64_t trace_start = trace::Enabled() ? trace::NowNs() : 0;
        Result<std::optional<SampleData>> item = sources[source].reader->Next();
        const double waited = SecondsSince(start);
        if (trace_start != 0) trace::Complete("wait read", "wait", trace_start, trace::NowNs());
        if (!item) return Fail(item.error());
        std::optional<SampleData>& data = *item;
        if (!data) return Fail(Status::Internal("the read pipeline ended before the plan"));
        batch->positions[slot] = pos + slot;
        batch->samples[slot] = data->sample;
        batch->sources[slot] = source;
        batch->labels[slot] = data->label;
        std::unique_lock lock(mu);
        stats.read_wait_seconds += waited;
        batch->read_wait += waited;
        batch->read_since.store(0, std::memory_order_release);
        dispatch_cv.wait(lock, [&] { return stopping || tasks.size() < task_capacity; });
        if (stopping) return;
        tasks.push_back({batch, slot, source, *std::move(data)});
        work_cv.notify_one();
      }
      pos += count;
    }
    std::lock_guard lock(mu);
    dispatch_done = true;
    work_cv.notify_all();
    batch_cv.notify_all();
  }

  void Work() {
    trace::NameThread("stoker decode");
    decode::Transformer transformer(options.transform);
    decode::TransformTimings reported;
    for (;;) {
      Task task;
      {
        std::unique_lock lock(mu);
        const Clock::time_point start = Clock::now();
        work_cv.wait(lock, [&] { return stopping || !tasks.empty() || dispatch_done; });
        stats.idle_seconds += SecondsSince(start);
        if (stopping || tasks.empty()) return;
        task = std::move(tasks.front());
        tasks.pop_front();
        dispatch_cv.notify_one();
      }
      Status status = task.data.status;
      const uint32_t sample = task.data.sample;
      std::optional<int64_t> label;  // from the label member, if one is named
      if (status.ok() && !options.label_member.empty()) {
        auto parsed = MemberLabel(*sources[task.source].dataset, task.data, options.label_member);
        if (parsed) {
          label = *parsed;
        } else {
          status = parsed.error();
        }
      }
      trace::Span span("decode", "decode");
      if (trace::Enabled()) span.set_args(fmt::format("\"sample\": {}", sample));
      if (status.ok()) {
        const Dataset& dataset = *sources[task.source].dataset;
        auto file = ImageFile(dataset, task.data, options.image_member);
        if (!file) {
          status = file.error();
        } else if (options.image_member.empty() &&
                   NotAnImage(dataset.FilePath((*file)->index), (*file)->bytes)) {
          task.batch->not_image[task.slot] = 1;  // written before remaining drops (under mu)
          status = Status::InvalidArgument(
              fmt::format("{}: not an image (no JPEG or PNG signature, no image extension): left "
                          "out, as torchvision's ImageFolder leaves it out",
                          dataset.FilePath((*file)->index)));
        } else {
          const uint64_t seed =
              decode::AugmentSeed(SourceSeed(options.seed, task.source), options.epoch, sample);
          if (gpu != nullptr) {
            StagedSample& staged = task.batch->staged[task.slot];
            staged.file = (*file)->index;
            status = Stage(transformer, (*file)->bytes, seed, staged);
          } else {
            std::byte* slot = task.batch->buffer.get() + size_t{task.slot} * sample_bytes;
            status = transformer.Run((*file)->bytes, seed, slot);
          }
          if (!status.ok()) status = status.WithContext(dataset.FilePath((*file)->index));
        }
      }
      task.data = {};  // give the bytes back to the read pipeline's budget now
      const decode::TransformTimings& t = transformer.timings();
      std::lock_guard lock(mu);
      stats.decode_seconds += t.decode - reported.decode;
      stats.resize_seconds += t.resize - reported.resize;
      stats.output_seconds += t.output - reported.output;
      reported = t;
      task.batch->status[task.slot] = std::move(status);
      if (label) task.batch->labels[task.slot] = *label;
      if (--task.batch->remaining == 0) batch_cv.notify_all();
    }
  }

  // A GPU pipeline's transform-thread step: the sample's augmentation drawn and its bytes kept
  // for the GPU thread, or, for a sample the GPU does not decode, the CPU path's output.
  Status Stage(decode::Transformer& cpu, std::span<const std::byte> bytes, uint64_t seed,
               StagedSample& staged) const {
    STOKER_ASSIGN_OR_RETURN(const decode::ImageInfo info,
                            decode::ReadImageInfo(bytes, options.transform.limits));
    staged.seed = seed;
    staged.params = decode::ChooseParams(options.transform, info.width, info.height, seed);
    if (gpu->Decodes(bytes, staged.params)) {
      staged.bytes.assign(bytes.begin(), bytes.end());
      return Status::OK();
    }
    staged.on_host = true;
    staged.bytes.resize(sample_bytes);
    return cpu.Run(bytes, seed, staged.bytes.data());
  }

  // A GPU thread: takes the batches, in order, as their slots are staged, and makes them on
  // the device with its own batch maker (several threads keep several batches in flight).
  void MakeOnDevice(decode::DeviceBatchMaker& maker) {
    trace::NameThread("stoker gpu");
    for (;;) {
      std::shared_ptr<PendingBatch> batch;
      {
        std::unique_lock lock(mu);
        bool all_claimed = false;
        batch_cv.wait(lock, [&] {
          auto next = std::find_if(batches.begin(), batches.end(),
                                   [](const auto& b) { return !b->claimed; });
          all_claimed = next == batches.end();
          if (!all_claimed && (*next)->remaining == 0) batch = *next;
          return stopping || !fatal.ok() || batch != nullptr || (all_claimed && dispatch_done);
        });
        if (batch == nullptr || !fatal.ok()) return;
        batch->claimed = true;
      }
      const Clock::time_point start = Clock::now();
      Status made;
      {
        trace::Span span("gpu batch", "decode");
        made = MakeBatch(maker, *batch);
      }
      std::lock_guard lock(mu);
      stats.gpu_seconds += SecondsSince(start);
      if (made.ok()) {
        batch->made = true;
      } else if (fatal.ok()) {
        fatal = std::move(made);
      }
      batch->staged.clear();
      batch_cv.notify_all();
    }
  }

  // Uploads the batch's CPU-made samples and runs the GPU on the rest; a sample's error goes to
  // its slot, an error of the whole batch (the GPU failed) is returned.
  Status MakeBatch(decode::DeviceBatchMaker& maker, PendingBatch& batch) {
    std::vector<decode::DeviceSample> samples;
    for (uint32_t slot = 0; slot < batch.staged.size(); ++slot) {
      if (!batch.status[slot].ok()) continue;
      const StagedSample& s = batch.staged[slot];
      std::byte* at = batch.buffer.get() + size_t{slot} * sample_bytes;
      if (s.on_host) {
        STOKER_RETURN_IF_ERROR(maker.Upload(at, s.bytes));
      } else {
        samples.push_back({s.bytes, s.seed, s.params, slot});
      }
    }
    STOKER_ASSIGN_OR_RETURN(std::vector<Status> status, maker.Run(samples, batch.buffer.get()));
    for (size_t i = 0; i < samples.size(); ++i) {
      if (status[i].ok()) continue;
      const uint32_t slot = samples[i].slot;
      const Dataset& dataset = *sources[batch.sources[slot]].dataset;
      batch.status[slot] = status[i].WithContext(dataset.FilePath(batch.staged[slot].file));
    }
    return Status::OK();
  }

  // Moves a finished batch out, leaving out (kSkip) or reporting (kRaise) failed samples.
  Result<ImageBatch> Deliver(PendingBatch& pending) {
    ImageBatch batch;
    const auto slots = static_cast<uint32_t>(pending.samples.size());
    batch.consumed = slots;
    batch.device = gpu != nullptr ? options.cuda_device : -1;
    for (uint32_t slot = 0; slot < slots; ++slot) {
      if (pending.status[slot].ok()) {
        if (batch.count != slot) {  // close the gap a skipped sample left
          std::byte* base = pending.buffer.get();
          std::byte* dst = base + size_t{batch.count} * sample_bytes;
          const std::byte* src = base + size_t{slot} * sample_bytes;
          if (gpu != nullptr) {
            STOKER_RETURN_IF_ERROR(gpu->Move(dst, src, sample_bytes));
          } else {
            std::memmove(dst, src, sample_bytes);
          }
        }
        batch.samples.push_back(pending.samples[slot]);
        batch.sources.push_back(pending.sources[slot]);
        batch.labels.push_back(pending.labels[slot]);
        ++batch.count;
        continue;
      }
      SampleError error{pending.positions[slot], pending.samples[slot], pending.sources[slot],
                        pending.status[slot]};
      if (pending.not_image[slot] != 0) {  // left out whatever on_error says
        batch.not_images.push_back(std::move(error));
        continue;
      }
      if (options.on_error == ErrorPolicy::kRaise) return Err(pending.status[slot]);
      batch.errors.push_back(std::move(error));
    }
    batch.images = std::move(pending.buffer);
    return batch;
  }
};

ImagePipeline::ImagePipeline(std::shared_ptr<State> state) : state_(std::move(state)) {}

Result<std::unique_ptr<ImagePipeline>> ImagePipeline::Start(std::shared_ptr<const Dataset> dataset,
                                                            std::vector<uint32_t> plan,
                                                            const ImagePipelineOptions& options) {
  std::vector<ImageSource> sources(1);
  sources[0].dataset = std::move(dataset);
  sources[0].plan = std::move(plan);
  return Start(std::move(sources), {}, options);
}

Result<std::unique_ptr<ImagePipeline>> ImagePipeline::Start(std::vector<ImageSource> sources,
                                                            std::vector<uint16_t> order,
                                                            const ImagePipelineOptions& options) {
  STOKER_RETURN_IF_ERROR(options.Validate());
  if (sources.empty()) return Err(Status::InvalidArgument("an image pipeline needs a source"));
  if (sources.size() > UINT16_MAX) return Err(Status::InvalidArgument("too many sources"));
  std::vector<size_t> taken(sources.size(), 0);
  for (uint16_t s : order) {
    if (s >= sources.size()) {
      return Err(
          Status::InvalidArgument(fmt::format("order names source {} of {}", s, sources.size())));
    }
    ++taken[s];
  }
  if (order.empty()) taken[0] = sources[0].plan.size();
  for (size_t s = 0; s < sources.size(); ++s) {
    if (taken[s] != sources[s].plan.size()) {
      return Err(Status::InvalidArgument(
          fmt::format("order takes {} samples of source {}, whose plan has {}", taken[s], s,
                      sources[s].plan.size())));
    }
  }
  auto state = std::make_shared<State>();
  state->options = options;
  const uint32_t threads = options.threads ? options.threads : DefaultTransformThreads();
  state->options.threads = threads;
  state->stats.threads = threads;
  state->prefetch = options.prefetch_batches ? options.prefetch_batches : 2;
  // Enough queued samples that no thread waits while the dispatcher fetches the next one.
  state->task_capacity = size_t{threads} * 4;
  state->sample_bytes = options.transform.output.sample_bytes();
  state->pool =
      std::make_shared<BufferPool>(state->sample_bytes * options.batch_size, state->prefetch + 2);
  if (options.cuda_device >= 0) {
    const uint32_t gpu_threads = options.gpu_threads ? options.gpu_threads : 2;
    // A batch in the making per GPU thread, and one ready for the consumer.
    state->prefetch = std::max(state->prefetch, gpu_threads + 1);
    for (uint32_t i = 0; i < gpu_threads; ++i) {
      STOKER_ASSIGN_OR_RETURN(
          auto maker, decode::DeviceBatchMaker::Create(options.transform, options.cuda_device,
                                                       state->sample_bytes * options.batch_size,
                                                       state->prefetch + 2));
      state->gpus.push_back(std::move(maker));
    }
    state->gpu = state->gpus[0].get();
  }
  state->positions = order.empty() ? sources[0].plan.size() : order.size();
  state->order = std::move(order);
  state->sources.reserve(sources.size());
  for (ImageSource& source : sources) {
    ReadPipelineOptions read = options.read;
    if (source.memory_budget_bytes != 0) read.memory_budget_bytes = source.memory_budget_bytes;
    // Decode workers release every sample they take, whatever the dispatcher waits for.
    read.samples_released_elsewhere = true;
    STOKER_ASSIGN_OR_RETURN(auto reader,
                            ReadPipeline::Start(source.dataset, std::move(source.plan), read));
    state->sources.push_back({std::move(source.dataset), std::move(reader)});
  }
  state->dispatcher = std::thread([s = state.get()] { s->Dispatch(); });
  for (uint32_t i = 0; i < threads; ++i) {
    state->workers.emplace_back([s = state.get()] { s->Work(); });
  }
  for (auto& maker : state->gpus) {
    state->gpu_threads.emplace_back([s = state.get(), m = maker.get()] { s->MakeOnDevice(*m); });
  }
  return std::unique_ptr<ImagePipeline>(new ImagePipeline(std::move(state)));
}

ImagePipeline::~ImagePipeline() {
  State& s = *state_;
  {
    std::lock_guard lock(s.mu);
    s.stopping = true;
  }
  s.work_cv.notify_all();
  s.dispatch_cv.notify_all();
  s.batch_cv.notify_all();
  for (std::thread& t : s.workers) t.join();
  for (std::thread& t : s.gpu_threads) t.join();
  {
    // Queued samples hold read-pipeline budget the dispatcher may be waiting for.
    std::lock_guard lock(s.mu);
    s.tasks.clear();
  }
  s.dispatcher.join();
}

Result<std::optional<ImageBatch>> ImagePipeline::Next() {
  State& s = *state_;
  std::shared_ptr<PendingBatch> pending;
  double waited = 0, read_waited = 0;
  {
    std::unique_lock lock(s.mu);
    const Clock::time_point start = Clock::now();
    // The batch waited for may not be dispatched yet: then all its read wait is in this wait.
    const double read_before = s.batches.empty() ? 0 : s.batches.front()->ReadWaitAt(start);
    s.batch_cv.wait(lock, [&] {
      return !s.fatal.ok() || (!s.batches.empty() && s.Ready(*s.batches.front())) ||
             (s.dispatch_done && s.batches.empty());
    });
    const Clock::time_point end = Clock::now();
    waited = std::chrono::duration<double>(end - start).count();
    if (trace::Enabled()) {
      const uint64_t end_ns = trace::NowNs();
      trace::Complete("wait batch", "wait", end_ns - static_cast<uint64_t>(waited * 1e9), end_ns);
    }
    s.stats.consumer_wait_seconds += waited;
    if (s.batches.empty() || !s.Ready(*s.batches.front())) {
      if (!s.fatal.ok()) return Err(s.fatal);
      return std::nullopt;
    }
    read_waited = std::clamp(s.batches.front()->ReadWaitAt(end) - read_before, 0.0, waited);
    pending = std::move(s.batches.front());
    s.batches.pop_front();
    s.dispatch_cv.notify_all();
  }
  Result<ImageBatch> batch = s.Deliver(*pending);
  std::lock_guard lock(s.mu);
  if (!batch) {
    if (s.fatal.ok()) s.fatal = batch.error();
    return Err(s.fatal);
  }
  batch->waited_seconds = waited;
  batch->read_waited_seconds = read_waited;
  ++s.stats.batches;
  s.stats.samples += batch->count;
  s.stats.skipped += batch->errors.size();
  s.stats.not_images += batch->not_images.size();
  return std::optional<ImageBatch>(std::move(*batch));
}

ImagePipelineStats ImagePipeline::stats() const {
  ImagePipelineStats out;
  {
    std::lock_guard lock(state_->mu);
    out = state_->stats;
  }
  for (const State::Source& source : state_->sources) {
    const ReadPipelineStats r = source.reader->stats();
    out.read.samples += r.samples;
    out.read.ranges += r.ranges;
    out.read.bytes_read += r.bytes_read;
    out.read.payload_bytes += r.payload_bytes;
    out.read.consumer_waits += r.consumer_waits;
    out.read.consumer_wait_seconds += r.consumer_wait_seconds;
    out.read.peak_bytes_held += r.peak_bytes_held;  // an upper bound of the peaks' sum
  }
  return out;
}

}  // namespace stoker::loader
