// The read pipeline: fetches a rank's samples ahead of the consumer, in the sampler's order,
// under a hard memory budget.
//
// It walks the plan in segments of up to `segment_bytes`, sorts each segment's file extents by
// (chunk, offset) and coalesces neighbours (holes up to `max_gap_bytes`) into range reads of up to
// `max_range_bytes`, which the I/O engine (io_uring or a pread pool) runs concurrently. In chunk
// mode a segment covers whole windows' worth of chunks, so ranges are long sequential reads;
// in full mode they degrade to one read per sample, as they must. Every file's CRC32C is checked
// before its sample is handed out; a bad CRC or a failed read becomes that sample's status
// (naming the file), and the epoch goes on.
//
// Memory: the bytes of every range read or in flight count against `memory_budget_bytes` until
// the last sample referencing them is released, samples the consumer still holds included.
//
// Thread-safety: Next() from one consumer thread; everything else is internal.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "loader/io_engine.h"
#include "stoker/dataset.h"

namespace stoker::loader {

struct ReadPipelineOptions {
  uint64_t memory_budget_bytes = 1ull << 30;  // hard cap on bytes held
  uint64_t segment_bytes = 0;                 // plan bytes grouped per step; 0: budget / 2
  uint64_t max_range_bytes = 16ull << 20;     // longest single read
  uint64_t max_gap_bytes = 1ull << 20;        // read through holes up to this size
  uint32_t io_depth = 8;                      // concurrent reads
  IoEngineKind engine = IoEngineKind::kAuto;
  // The consumer hands delivered samples to other threads that release them without waiting
  // for more samples (the image pipeline's decode workers). Budget held by delivered samples
  // then always comes back, so Next() waits for it instead of reporting the budget used up:
  // any budget works (a sample larger than the budget is read alone), only slower.
  bool samples_released_elsewhere = false;
  // Positions are read only once Admit()ted, and skipped where Admit says so: the image
  // pipeline with feeders (decision 0013) decides slice by slice which positions it makes
  // itself, and never reads the ones a feeder makes. Off: the whole plan is admitted at Start.
  bool gated = false;
  Status Validate() const;
};

// One sample, delivered in plan order.
struct SampleData {
  uint64_t position = 0;  // index in the plan
  uint32_t sample = 0;
  int32_t label = -1;  // the sample's label (-1: none)
  Status status;       // OK, or why the sample could not be delivered (names the file)
  struct File {
    uint32_t index;
    std::span<const std::byte> bytes;  // valid while this SampleData (or a copy) lives
  };
  std::vector<File> files;
  std::vector<std::shared_ptr<const void>> keepalive;  // the range buffers `files` point into
};

struct ReadPipelineStats {
  uint64_t samples = 0, ranges = 0, bytes_read = 0, payload_bytes = 0;
  uint64_t consumer_waits = 0;       // Next() calls that had to block
  double consumer_wait_seconds = 0;  // time Next() spent blocked (data not ready)
  uint64_t peak_bytes_held = 0;
};

class ReadPipeline {
 public:
  static Result<std::unique_ptr<ReadPipeline>> Start(std::shared_ptr<const Dataset> dataset,
                                                     std::vector<uint32_t> plan,
                                                     const ReadPipelineOptions& options);
  ~ReadPipeline();

  // The next sample in plan order (blocking), nullopt after the last. An error here is a
  // failure of the pipeline itself (e.g. the budget is exhausted by samples the consumer holds,
  // unless options.samples_released_elsewhere);
  // per-sample failures are in SampleData::status.
  // (Only the positions admitted to be read are delivered.)
  Result<std::optional<SampleData>> Next();

  // options.gated: plan positions [first, end) are decided, `read` or skipped. Calls follow
  // the plan: `first` is the previous call's `end` (0 at first). Any thread.
  Status Admit(uint64_t first, uint64_t end, bool read);

  ReadPipelineStats stats() const;
  std::string_view engine_name() const;

  struct State;  // shared with range buffers and I/O callbacks

 private:
  explicit ReadPipeline(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace stoker::loader
