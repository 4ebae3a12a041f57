// The image pipeline's shared state (private to src/loader/): what the dispatcher, the transform
// threads, the GPU threads and the consumer share. image_pipeline.cc runs the CPU path (dispatch,
// transform, delivery); image_pipeline_gpu.cc the GPU staging and batch making
// (options.cuda_device, decode/device_batches.h); image_pipeline_feeders.cc the slices and the
// feeders (options.feeders). The fields from `mu` to `stats`, and the slice queues, are guarded
// by `mu`.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "decode/device_batches.h"
#include "decode/transform.h"
#include "feed_client/feeder_client.h"
#include "loader/buffer_pool.h"
#include "loader/image_pipeline.h"
#include "loader/read_pipeline.h"

namespace stoker::loader {

struct ImagePipeline::State {
  using Clock = std::chrono::steady_clock;
  static double SecondsSince(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
  }
  // The augmentation seed of a source's samples: the loader's for source 0 (a single dataset),
  // so that a sample of another source with the same index draws other crops.
  static uint64_t SourceSeed(uint64_t seed, uint16_t source) {
    return source == 0 ? seed : seed ^ (0x9E3779B97F4A7C15ULL * source);
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
    uint32_t remote = 0;                 // slots feeders are making now (State::mu)
  };

  // Who makes a slice's rows: the first maker to finish claims it (State::mu), and only the
  // claimer writes its slots; a hedged copy made later is dropped. A feeder whose answer is
  // arriving straight into the slots holds them while it does (`placing`): nobody else writes
  // them, but its claim is revoked if the answer fails its checks.
  struct SliceClaim {
    bool claimed = false;
    bool placing = false;
    bool taken() const { return claimed || placing; }
  };

  // Slots [slot, slot + count) of a batch: consecutive positions of one source (feeders). A
  // slice and its copies (made again after a failure, or hedged) share one claim.
  struct Slice {
    std::shared_ptr<PendingBatch> batch;
    uint32_t slot = 0, count = 0;
    uint16_t source = 0;
    uint64_t source_first = 0;  // its first sample's index in its source's plan
    std::shared_ptr<SliceClaim> claim;
    bool local_only = false;  // a feeder could not make a sample of it: made here
    bool redone = false;      // a copy: the read pipeline skipped it, so it is read directly
  };

  // How long a feeder's slice may take: past `hedge` a copy is offered to the other makers,
  // past `give_up` the connection is abandoned (seconds from sending).
  struct Deadlines {
    double hedge = 0, give_up = 0;
  };

  // One feeder of options.feeders, shared by its credits' threads (State::mu).
  struct FeederLink {
    net::ServerAddress address;
    FeederStats stats;
    double slice_seconds = 0;  // recent round trip per slice (moving average); 0: none yet
    bool warned = false;       // its failure was reported and it has not answered since
    uint64_t warnings = 0;     // failures reported
    uint64_t recoveries = 0;   // "answers again" after a warning
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
    std::vector<uint32_t> plan;  // options.feeders only: the samples of its slices
    std::string uri;             // options.feeders only: how feeders open it
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

  // options.feeders (image_pipeline_feeders.cc): slices of the batches made room for, not yet
  // taken, in plan order; slices a feeder failed, made again first; the feeders; the
  // connections making a slice now (to wake them when stopping).
  std::deque<Slice> open_slices, redo_slices;
  bool slicing_done = false;  // every batch's slices are queued
  // The claims of the slices feeders are making now (one entry per slice being made).
  std::vector<std::shared_ptr<SliceClaim>> remote_claims;
  std::vector<FeederLink> links;
  std::vector<feed::FeederConnection*> making;
  std::string wire_transform;        // the transform's options text, uint8 NHWC output
  std::condition_variable slice_cv;  // slice takers: a slice queued, or the end

  std::thread dispatcher, local_slicer;
  std::vector<std::thread> workers, gpu_threads, feeder_threads;

  // Whether the consumer can have `batch`: every slot written (and, on a GPU, the batch made).
  bool Ready(const PendingBatch& batch) const {
    return batch.remaining == 0 && (gpu == nullptr || batch.made);
  }

  // image_pipeline.cc: the CPU path.
  void Fail(Status status);
  // A batch of `count` slots, once the window has room for it (its buffer: the pool's, or the
  // GPU's); nullptr if the pipeline is stopping. Both dispatchers make their batches so.
  Result<std::shared_ptr<PendingBatch>> NextBatch(uint32_t count);
  void Dispatch();  // the dispatcher thread
  void Work();      // a transform thread
  // Moves a finished batch out, leaving out (kSkip) or reporting (kRaise) failed samples.
  Result<ImageBatch> Deliver(PendingBatch& pending);

  // image_pipeline_feeders.cc: slices, and who takes them.
  Status StartFeeders(const std::vector<ImageSource>& sources);  // before any thread runs
  void DispatchSlices();     // the dispatcher with feeders: batches, cut into slices
  void MakeLocalSlices();    // takes slices for the transform threads
  void Feed(size_t feeder);  // one credit of one feeder: takes slices and sends them
  void StopFeeders();        // joins the feeders' threads (stopping is set)
  // The next slice for a feeder (redo first, not local_only), or for the local path (redo
  // first, an open one only if `take_open`); nullopt if none. Called with mu held.
  std::optional<Slice> TakeSlice(bool for_feeder, bool take_open);
  // A slice not yet claimed: queued, or being made by a feeder (mu held). A hedged slice a
  // stopped feeder still holds does not count once its copy is made.
  bool SlicesLeft() const;
  bool FeederWork() const;    // a slice a feeder may take (mu held)
  void SlicesChanged();       // wakes the slice takers
  void Requeue(Slice slice);  // a copy into redo_slices, in plan order (mu held)

  // image_pipeline_remote.cc: the feeders' threads.
  feed::SliceRequest RequestFor(const Slice& slice) const;
  Deadlines DeadlinesFor(const FeederLink& link) const;  // mu held
  // Sends the slice and waits for its answer, hedging it past deadlines.hedge. Rows kept as
  // the wire carries them (uint8 NHWC) are received straight into the slots when no other
  // maker has the slice: `placing` says so (the claim's placing is then set).
  Result<feed::SliceAnswer> Ask(feed::FeederConnection& connection, const Slice& slice,
                                Deadlines deadlines, bool& placing);
  // Corruption if the answer's images are not the size asked for.
  Status CheckAnswer(const feed::SliceAnswer& answer, const std::string& peer) const;
  // The output is uint8 NHWC, the rows as feeders send them.
  bool RowsAsOnTheWire() const;
  // Writes a checked answer (every sample made) into the slice's slots, its pixels unless they
  // are there already: the claimer only.
  void Place(const Slice& slice, const feed::SliceAnswer& answer);

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
