// The image pipeline's GPU path (options.cuda_device; image_pipeline_state.h): transform threads
// stage each sample (Stage), and GPU threads make the batches on the device, in order.
#include <algorithm>
#include <chrono>
#include <mutex>
#include <utility>

#include "common/trace.h"
#include "decode/decoder.h"
#include "loader/image_pipeline_state.h"

namespace stoker::loader {

Status ImagePipeline::State::CreateDeviceMakers() {
  const uint32_t threads = options.gpu_threads ? options.gpu_threads : 2;
  // A batch in the making per GPU thread, and one ready for the consumer.
  prefetch = std::max(prefetch, threads + 1);
  for (uint32_t i = 0; i < threads; ++i) {
    STOKER_ASSIGN_OR_RETURN(auto maker, decode::DeviceBatchMaker::Create(
                                            options.transform, options.cuda_device,
                                            sample_bytes * options.batch_size, prefetch + 2));
    gpus.push_back(std::move(maker));
  }
  gpu = gpus[0].get();
  return Status::OK();
}

Status ImagePipeline::State::Stage(decode::Transformer& cpu, std::span<const std::byte> bytes,
                                   uint64_t seed, StagedSample& staged) const {
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

void ImagePipeline::State::MakeOnDevice(decode::DeviceBatchMaker& maker) {
  trace::NameThread("stoker gpu");
  for (;;) {
    std::shared_ptr<PendingBatch> batch;
    {
      std::unique_lock lock(mu);
      bool all_claimed = false;
      batch_cv.wait(lock, [&] {
        auto next =
            std::find_if(batches.begin(), batches.end(), [](const auto& b) { return !b->claimed; });
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

Status ImagePipeline::State::MakeBatch(decode::DeviceBatchMaker& maker, PendingBatch& batch) {
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

}  // namespace stoker::loader
