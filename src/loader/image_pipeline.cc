#include "loader/image_pipeline.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "common/trace.h"
#include "decode/augment.h"
#include "loader/buffer_pool.h"
#include "loader/image_members.h"
#include "loader/image_pipeline_state.h"

namespace stoker::loader {
namespace {

using Clock = ImagePipeline::State::Clock;
using PendingBatch = ImagePipeline::State::PendingBatch;

// Batches made room for ahead of the consumer, at least: with feeders, enough that every
// feeder's credits and the local threads find slices to take.
uint32_t PrefetchBatches(const ImagePipelineOptions& o, uint32_t threads) {
  const uint32_t asked = o.prefetch_batches ? o.prefetch_batches : 2;
  const FeederPoolOptions& f = o.feeders;
  if (f.addresses.empty()) return asked;
  const uint64_t slices = uint64_t{f.credits} * f.addresses.size() +
                          (uint64_t{threads} * 4 + f.slice_size - 1) / f.slice_size + 1;
  const uint64_t per_batch = (uint64_t{o.batch_size} + f.slice_size - 1) / f.slice_size;
  const uint64_t needed = (slices + per_batch - 1) / per_batch + 1;
  return static_cast<uint32_t>(std::clamp<uint64_t>(needed, asked, std::max(asked, 64u)));
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
  if (!feeders.addresses.empty() && cuda_device >= 0) {
    return Status::Unsupported("feeders make batches for the CPU path only, not on a GPU");
  }
  STOKER_RETURN_IF_ERROR(feeders.Validate());
  STOKER_RETURN_IF_ERROR(read.Validate());
  return transform.Validate();
}

void ImagePipeline::State::Fail(Status status) {
  std::lock_guard lock(mu);
  if (fatal.ok()) fatal = std::move(status);
  batch_cv.notify_all();
}

Result<std::shared_ptr<PendingBatch>> ImagePipeline::State::NextBatch(uint32_t count) {
  {
    std::unique_lock lock(mu);
    dispatch_cv.wait(lock, [&] { return stopping || batches.size() < prefetch; });
    if (stopping) return std::shared_ptr<PendingBatch>();
  }
  auto batch = std::make_shared<PendingBatch>();
  if (gpu != nullptr) {
    STOKER_ASSIGN_OR_RETURN(batch->buffer, gpu->Acquire());
    batch->staged.resize(count);
  } else {
    STOKER_ASSIGN_OR_RETURN(batch->buffer, pool->Acquire());
  }
  batch->remaining = count;
  batch->positions.resize(count);
  batch->samples.resize(count);
  batch->sources.resize(count);
  batch->labels.assign(count, -1);
  batch->status.resize(count);
  batch->not_image.resize(count);
  return batch;
}

void ImagePipeline::State::Dispatch() {
  trace::NameThread("stoker dispatch");
  const uint32_t batch_size = options.batch_size;
  for (size_t pos = 0; pos < positions;) {
    const auto count = static_cast<uint32_t>(std::min<size_t>(batch_size, positions - pos));
    if (options.drop_last && count < batch_size) break;
    Result<std::shared_ptr<PendingBatch>> made = NextBatch(count);
    if (!made) return Fail(made.error());
    if (*made == nullptr) return;  // stopping
    std::shared_ptr<PendingBatch> batch = *std::move(made);
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

void ImagePipeline::State::Work() {
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
      dispatch_cv.notify_all();  // the dispatcher, or with feeders the local slicer
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
        const uint64_t seed = decode::AugmentSeed(State::SourceSeed(options.seed, task.source),
                                                  options.epoch, sample);
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

// Moves a finished batch out, leaving out (kSkip) or reporting (kRaise) failed samples.
Result<ImageBatch> ImagePipeline::State::Deliver(PendingBatch& pending) {
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
  state->prefetch = PrefetchBatches(options, threads);
  // Enough queued samples that no thread waits while the dispatcher fetches the next one.
  state->task_capacity = size_t{threads} * 4;
  state->sample_bytes = options.transform.output.sample_bytes();
  state->pool =
      std::make_shared<BufferPool>(state->sample_bytes * options.batch_size, state->prefetch + 2);
  if (options.cuda_device >= 0) STOKER_RETURN_IF_ERROR(state->CreateDeviceMakers());
  state->positions = order.empty() ? sources[0].plan.size() : order.size();
  state->order = std::move(order);
  const bool feeders = !options.feeders.addresses.empty();
  if (feeders) STOKER_RETURN_IF_ERROR(state->StartFeeders(sources));
  state->sources.reserve(sources.size());
  for (ImageSource& source : sources) {
    ReadPipelineOptions read = options.read;
    if (source.memory_budget_bytes != 0) read.memory_budget_bytes = source.memory_budget_bytes;
    // Decode workers release every sample they take, whatever the dispatcher waits for.
    read.samples_released_elsewhere = true;
    read.gated = feeders;  // a slice a feeder makes is not read here
    std::vector<uint32_t> plan = feeders ? source.plan : std::move(source.plan);
    STOKER_ASSIGN_OR_RETURN(auto reader,
                            ReadPipeline::Start(source.dataset, std::move(plan), read));
    state->sources.push_back({std::move(source.dataset), std::move(reader),
                              feeders ? std::move(source.plan) : std::vector<uint32_t>{},
                              std::move(source.uri)});
  }
  if (feeders) {
    state->dispatcher = std::thread([s = state.get()] { s->DispatchSlices(); });
    state->local_slicer = std::thread([s = state.get()] { s->MakeLocalSlices(); });
    for (size_t f = 0; f < state->links.size(); ++f) {
      for (uint32_t c = 0; c < options.feeders.credits; ++c) {
        state->feeder_threads.emplace_back([s = state.get(), f] { s->Feed(f); });
      }
    }
  } else {
    state->dispatcher = std::thread([s = state.get()] { s->Dispatch(); });
  }
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
  s.StopFeeders();
  for (std::thread& t : s.workers) t.join();
  for (std::thread& t : s.gpu_threads) t.join();
  {
    // Queued samples hold read-pipeline budget the dispatcher may be waiting for.
    std::lock_guard lock(s.mu);
    s.tasks.clear();
  }
  s.dispatcher.join();
  if (s.local_slicer.joinable()) s.local_slicer.join();
}

Result<std::optional<ImageBatch>> ImagePipeline::Next() {
  State& s = *state_;
  std::shared_ptr<PendingBatch> pending;
  double waited = 0, read_waited = 0, feeder_waited = 0;
  {
    std::unique_lock lock(s.mu);
    const Clock::time_point start = Clock::now();
    // The batch waited for may not be dispatched yet: then all its read wait is in this wait.
    const double read_before = s.batches.empty() ? 0 : s.batches.front()->ReadWaitAt(start);
    // Waiting for a batch of which feeders are making slices is waiting for the feeders.
    const bool remote_before = !s.batches.empty() && s.batches.front()->remote > 0;
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
    if (remote_before) feeder_waited = waited - read_waited;
    s.stats.feeder_wait_seconds += feeder_waited;
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
  batch->feeder_waited_seconds = feeder_waited;
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
    for (const State::FeederLink& link : state_->links) out.feeders.push_back(link.stats);
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
