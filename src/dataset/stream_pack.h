// Packing from a producer that hands samples over one at a time (stoker.Writer): Pack runs on a
// thread of its own over a queue the producer fills, so encoding (the producer's thread) and
// CRC, chunk writes and metadata sorting (the packing thread) overlap. The queue holds at most
// `queue_bytes`, so a fast producer waits rather than filling memory.
//
// Everything Pack guarantees holds: nothing is visible until Finish publishes the version
// (atomically, rebasing over concurrent appends); Abort, a failed pack or a crash leave no
// version behind.
//
// Thread-safety: Add, Finish and Abort from one producer thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dataset/packer.h"
#include "dataset/source.h"
#include "stoker/storage.h"

namespace stoker::dataset {

// Where a writer's samples go: "<name>/" (e.g. one per input group of stoker.optimize, or per
// engine task, so a rerun can tell which groups a dataset holds), else "<random id>/", so two
// writers appending at once never share a path. InvalidArgument for a name that is not 1 to 64
// letters, digits, '.', '_' or '-'.
Result<std::string> SampleKeyPrefix(const std::optional<std::string>& name);

class StreamPack {
 public:
  // Starts packing into `destination` (checked as Pack checks it: a new or empty directory, or
  // with options.append an existing dataset of the same columns). Errors Pack finds before
  // reading input come back from here, or at the latest from the first Add.
  static Result<std::unique_ptr<StreamPack>> Start(std::shared_ptr<Storage> destination,
                                                   PackOptions options, uint64_t queue_bytes);
  ~StreamPack();  // Abort() unless finished

  // Queues one sample's files (their paths sharing the sample's key), blocking while the
  // queue is full. An error if the pack has failed (the error it failed with) or was finished.
  Status Add(std::vector<SourceItem> sample);
  // No more samples: waits for the pack to publish and returns its summary.
  Result<PackSummary> Finish();
  // Stops the pack; nothing is published and what it wrote is removed. Idempotent.
  void Abort();

  uint64_t samples_added() const;

 private:
  class Queue;
  StreamPack() = default;
  std::shared_ptr<Storage> destination_;
  std::unique_ptr<Queue> queue_;
  std::thread thread_;
  Result<PackSummary> result_ = Err(Status::Internal("not finished"));
  bool finished_ = false;
};

}  // namespace stoker::dataset
