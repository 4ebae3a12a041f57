// The image pipeline's shared state (private to src/loader/): what the dispatcher, the transform
// threads, the GPU threads and the consumer share. image_pipeline.cc runs the CPU path (dispatch,
// transform, delivery); image_pipeline_gpu.cc the GPU staging and batch making
// (options.cuda_device, decode/device_batches.h). The fields from `mu` to `stats` are guarded by
// `mu`.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "decode/device_batches.h"
#include "decode/transform.h"
#include "loader/buffer_pool.h"
#include "loader/image_pipeline.h"
#include "loader/read_pipeline.h"

namespace stoker::loader {

struct ImagePipeline::State {
  using Clock = std::chrono::steady_clock;
  static double SecondsSince(Clock::time_point start) {
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

  // image_pipeline.cc: the CPU path.
  void Fail(Status status);
  void Dispatch();  // the dispatcher thread
  void Work();      // a transform thread
  // Moves a finished batch out, leaving out (kSkip) or reporting (kRaise) failed samples.
  Result<ImageBatch> Deliver(PendingBatch& pending);

  // image_pipeline_gpu.cc: the GPU path.
  // One batch maker per GPU thread on options.cuda_device (raises `prefetch` to keep each busy).
  Status CreateDeviceMakers();
  // A GPU pipeline's transform-thread step: the sample's augmentation drawn and its bytes kept
  // for the GPU thread, or, for a sample the GPU does not decode, the CPU path's output.
  Status Stage(decode::Transformer& cpu, std::span<const std::byte> bytes, uint64_t seed,
               StagedSample& staged) const;
  // A GPU thread: takes the batches, in order, as their slots are staged, and makes them on
  // the device with its own batch maker (several threads keep several batches in flight).
  void MakeOnDevice(decode::DeviceBatchMaker& maker);
  // Uploads the batch's CPU-made samples and runs the GPU on the rest; a sample's error goes to
  // its slot, an error of the whole batch (the GPU failed) is returned.
  Status MakeBatch(decode::DeviceBatchMaker& maker, PendingBatch& batch);
};

}  // namespace stoker::loader
