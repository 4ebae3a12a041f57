// The image pipeline with feeders (options.feeders; decision 0013; see image_pipeline.h): the
// dispatcher cuts each batch into slices, the local path and every feeder's credits take them
// from the front, and a slice a feeder fails is made again — by another feeder, or here.
#include <algorithm>

#include <fmt/format.h>

#include "common/option_table.h"
#include "common/trace.h"
#include "decode/transform_option_table.h"
#include "loader/image_pipeline_state.h"
#include "net/auth.h"
#include "net/protocol.h"

namespace stoker::loader {
namespace {

using State = ImagePipeline::State;
using Clock = State::Clock;

// A sample read directly, as the read pipeline would deliver it: the samples of a slice a feeder
// failed were skipped by the read pipeline. A file that cannot be read or fails its CRC becomes
// the sample's status, naming it.
SampleData ReadDirectly(const Dataset& dataset, uint64_t position, uint32_t sample) {
  SampleData data;
  data.position = position;
  data.sample = sample;
  Result<int32_t> label = dataset.SampleLabel(sample);
  data.label = label ? *label : -1;
  Result<std::pair<uint64_t, uint64_t>> files = dataset.SampleFiles(sample);
  if (!files) {
    data.status = files.error();
    return data;
  }
  const auto [first, count] = *files;
  for (uint64_t file = first; file < first + count; ++file) {
    Result<std::vector<std::byte>> bytes = dataset.ReadFile(file);
    if (!bytes) {
      data.status = bytes.error();
      return data;
    }
    auto held = std::make_shared<std::vector<std::byte>>(*std::move(bytes));
    data.files.push_back({static_cast<uint32_t>(file), std::span<const std::byte>(*held)});
    data.keepalive.push_back(std::move(held));
  }
  return data;
}

}  // namespace

Status FeederPoolOptions::Validate() const {
  if (addresses.empty()) return Status::OK();
  if (slice_size == 0 || slice_size > feed::kMaxSliceSamples) {
    return Status::InvalidArgument(
        fmt::format("slice_size must be 1..{}, not {}", feed::kMaxSliceSamples, slice_size));
  }
  if (credits == 0 || credits > 64) {
    return Status::InvalidArgument(fmt::format("feeder credits must be 1..64, not {}", credits));
  }
  if (!(min_deadline_seconds > 0) || !(first_deadline_seconds > 0) ||
      !(connect_timeout_seconds > 0)) {
    return Status::InvalidArgument("feeder deadlines must be positive");
  }
  return net::CheckSecret(secret, "the feeders' secret (the job's)");
}

Status ImagePipeline::State::StartFeeders(const std::vector<ImageSource>& source_list) {
  for (size_t s = 0; s < source_list.size(); ++s) {
    if (source_list[s].uri.empty()) {
      return Status::InvalidArgument(fmt::format(
          "feeders open the dataset by its URI, and source {} has none (open it by path or URI)",
          s));
    }
  }
  // Feeders answer uint8 NHWC: a quarter of float32's bytes; normalizing stays here.
  decode::TransformOptions wire = options.transform;
  wire.output.dtype = decode::DType::kUint8;
  wire.output.layout = decode::Layout::kNHWC;
  wire_transform = OptionsText(decode::TransformOptionTable(), wire);
  // A slice's images fit one answer frame: larger images, shorter slices.
  const uint64_t per_sample = wire.output.sample_bytes() + feed::kMadeBytesPerSample;
  const uint64_t fits = net::kMaxAnswerFrame / per_sample;
  if (fits == 0) {
    return Status::InvalidArgument(
        fmt::format("images of {}x{} do not fit a feeder's answer (16 MiB)", wire.output.width,
                    wire.output.height));
  }
  options.feeders.slice_size =
      static_cast<uint32_t>(std::min<uint64_t>(options.feeders.slice_size, fits));
  for (const net::ServerAddress& address : options.feeders.addresses) {
    FeederLink link;
    link.address = address;
    link.stats.address = address.ToString();
    links.push_back(std::move(link));
  }
  return Status::OK();
}

void ImagePipeline::State::DispatchSlices() {
  trace::NameThread("stoker dispatch");
  const uint32_t batch_size = options.batch_size;
  const uint32_t slice_size = options.feeders.slice_size;
  std::vector<uint64_t> next_of(sources.size(), 0);  // per source, the next index of its plan
  for (size_t pos = 0; pos < positions;) {
    const auto count = static_cast<uint32_t>(std::min<size_t>(batch_size, positions - pos));
    if (options.drop_last && count < batch_size) break;
    Result<std::shared_ptr<PendingBatch>> made = NextBatch(count);
    if (!made) return Fail(made.error());
    if (*made == nullptr) return;  // stopping
    std::shared_ptr<PendingBatch> batch = *std::move(made);
    std::vector<Slice> cut;
    for (uint32_t slot = 0; slot < count; ++slot) {
      const uint16_t source = order.empty() ? 0 : order[pos + slot];
      batch->positions[slot] = pos + slot;
      batch->sources[slot] = source;
      batch->samples[slot] = sources[source].plan[next_of[source]];
      if (cut.empty() || cut.back().source != source || cut.back().count == slice_size) {
        cut.push_back({batch, slot, 0, source, next_of[source], std::make_shared<SliceClaim>()});
      }
      ++cut.back().count;
      ++next_of[source];
    }
    {
      std::lock_guard lock(mu);
      batches.push_back(batch);
      for (Slice& slice : cut) open_slices.push_back(std::move(slice));
    }
    SlicesChanged();
    pos += count;
  }
  {
    std::lock_guard lock(mu);
    slicing_done = true;
  }
  SlicesChanged();
}

void ImagePipeline::State::SlicesChanged() {
  slice_cv.notify_all();
  dispatch_cv.notify_all();  // the local path waits there (for slices and for task room)
}

bool ImagePipeline::State::SlicesLeft() const {
  const auto unclaimed = [](const Slice& s) { return !s.claim->claimed; };
  return !open_slices.empty() || std::ranges::any_of(redo_slices, unclaimed) ||
         std::ranges::any_of(remote_claims, [](const auto& c) { return !c->claimed; });
}

bool ImagePipeline::State::FeederWork() const {
  return !open_slices.empty() || std::ranges::any_of(redo_slices, [](const Slice& s) {
    return !s.local_only && !s.claim->taken();
  });
}

std::optional<ImagePipeline::State::Slice> ImagePipeline::State::TakeSlice(bool for_feeder,
                                                                           bool take_open) {
  std::erase_if(redo_slices, [](const Slice& s) { return s.claim->taken(); });  // made already
  for (auto it = redo_slices.begin(); it != redo_slices.end(); ++it) {
    if (for_feeder && it->local_only) continue;
    Slice slice = std::move(*it);
    redo_slices.erase(it);
    ++stats.redone_slices;
    // The local path commits to a slice when it takes it: its samples go to the decode
    // threads, which write the slots themselves.
    if (!for_feeder) slice.claim->claimed = true;
    return slice;
  }
  if (!take_open || open_slices.empty()) return std::nullopt;
  Slice slice = std::move(open_slices.front());
  open_slices.pop_front();
  if (!for_feeder) slice.claim->claimed = true;
  // Taken in plan order (under mu), so each source's positions are decided in order.
  Status admitted = sources[slice.source].reader->Admit(
      slice.source_first, slice.source_first + slice.count, /*read=*/!for_feeder);
  if (!admitted.ok()) {
    if (fatal.ok()) fatal = std::move(admitted);
    batch_cv.notify_all();
    return std::nullopt;
  }
  return slice;
}

void ImagePipeline::State::Requeue(Slice slice) {
  slice.redone = true;
  const uint64_t position = slice.batch->positions[slice.slot];
  auto later = std::ranges::find_if(
      redo_slices, [&](const Slice& s) { return s.batch->positions[s.slot] > position; });
  redo_slices.insert(later, std::move(slice));
}

void ImagePipeline::State::MakeLocalSlices() {
  trace::NameThread("stoker slices");
  for (;;) {
    std::optional<Slice> slice;
    {
      std::unique_lock lock(mu);
      dispatch_cv.wait(lock, [&] {
        return stopping || !fatal.ok() || !redo_slices.empty() ||
               (!open_slices.empty() && tasks.size() < task_capacity) ||
               (slicing_done && !SlicesLeft());
      });
      if (stopping || !fatal.ok()) return;
      slice = TakeSlice(/*for_feeder=*/false, /*take_open=*/tasks.size() < task_capacity);
      if (!slice) {
        if (!fatal.ok()) return;
        if (slicing_done && !SlicesLeft()) break;
        continue;
      }
      ++stats.local_slices;
    }
    SlicesChanged();  // a feeder may wait for the redo queue to drain
    PendingBatch& batch = *slice->batch;
    const Source& source = sources[slice->source];
    for (uint32_t slot = slice->slot; slot < slice->slot + slice->count; ++slot) {
      SampleData data;
      double waited = 0;
      if (slice->redone) {
        data = ReadDirectly(*source.dataset, batch.positions[slot], batch.samples[slot]);
      } else {
        const Clock::time_point start = Clock::now();
        batch.read_since.store(start.time_since_epoch().count(), std::memory_order_release);
        Result<std::optional<SampleData>> item = source.reader->Next();
        waited = SecondsSince(start);
        if (!item) return Fail(item.error());
        std::optional<SampleData>& read = *item;
        if (!read) return Fail(Status::Internal("the read pipeline ended before the plan"));
        data = *std::move(read);
      }
      batch.labels[slot] = data.label;
      std::unique_lock lock(mu);
      stats.read_wait_seconds += waited;
      batch.read_wait += waited;
      batch.read_since.store(0, std::memory_order_release);
      dispatch_cv.wait(lock, [&] { return stopping || tasks.size() < task_capacity; });
      if (stopping) return;
      tasks.push_back({slice->batch, slot, slice->source, std::move(data)});
      work_cv.notify_one();
    }
  }
  std::lock_guard lock(mu);
  dispatch_done = true;
  work_cv.notify_all();
  batch_cv.notify_all();
}

}  // namespace stoker::loader
