// The image pipeline: ready training batches from a rank's plan, made in C++ threads.
//
//   read pipeline (coalesced, CRC-checked range reads) ─▶ dispatcher ─▶ N transform threads
//     ─▶ batch buffers (decode + crop/resize + flip + normalize written straight into the slot)
//
// On a GPU (options.cuda_device, decode/device_batches.h) the transform threads only draw each
// sample's augmentation and keep its bytes (or, for what the GPU does not decode, the CPU
// path's output), and a GPU thread makes each batch, in order, in a device buffer.
//
// The dispatcher takes samples in plan order and hands each to the next free thread, with its
// slot in its batch; batches are delivered in plan order once every slot is written. Each
// sample's augmentation comes from (seed, epoch, sample index), so the output does not depend on
// which thread ran it or when. Batch buffers are recycled: a buffer goes back to the pool when
// the last reference to it (the caller's, e.g. a torch tensor's) is dropped, and the pipeline
// stays at most `prefetch_batches` batches ahead of the consumer.
//
// Bad images (corrupt, truncated, not an image, over the pixel limit) and failed reads follow
// `on_error`: kRaise makes Next() return the error, naming the sample's path; kSkip leaves the
// sample out of its batch (which then holds fewer images — every rank still yields the same
// number of batches) and reports it in ImageBatch::errors.
//
// Several sources (a stoker.Mix): each has its own dataset, plan and read pipeline, and
// `order` says which source each position of the batches' sequence comes from; a sample's
// augmentation then also depends on its source.
//
// Feeders (`stoker feed`, decision 0013; image_pipeline_feeders.cc): with options.feeders, the
// dispatcher cuts each batch into slices (consecutive positions of one source, at most
// slice_size) and the local threads and the feeders take them by demand, from the front: a
// feeder holds at most `credits` slices, the local path takes one when its decode threads have
// room. The read pipeline reads only the slices made here. A slice a feeder fails — refused,
// broken connection, past its deadline, a corrupt answer, a sample it could not make — is made
// again, by another feeder or here (then read directly). Feeders answer uint8 NHWC; rows are
// written into their fixed slots (normalized here if asked), so what Next() returns is byte
// for byte a local run's, whoever made it.
//
// Thread-safety: Next() and stats() from one consumer thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "decode/transform.h"
#include "loader/read_pipeline.h"
#include "net/uri.h"
#include "stoker/dataset.h"

namespace stoker::loader {

enum class ErrorPolicy : uint8_t { kRaise, kSkip };

// The feeders an image pipeline may give slices to (decision 0013).
struct FeederPoolOptions {
  std::vector<net::ServerAddress> addresses;  // empty: every sample is made here
  std::string secret;                         // the job's (the feeders' --secret-file)
  uint32_t slice_size = 32;                   // samples per slice at most (~4.8 MB at 224², uint8)
  uint32_t credits = 2;                       // slices in flight per feeder
  // A slice outstanding longer than max(min_deadline, 4 x the feeder's recent slice time) is
  // hedged: offered to the other makers too, the first to finish wins. One outstanding longer
  // than max(give_up, 8 x that) fails the connection (the feeder is warned about and tried
  // again later). A feeder's first slice (it opens the dataset) is hedged at the slowest pace
  // any feeder has shown (first_deadline / 6 if none has) and given up at first_deadline.
  double min_deadline_seconds = 1;
  double give_up_seconds = 5;
  double first_deadline_seconds = 30;
  double connect_timeout_seconds = 2;
  Status Validate() const;
};

struct ImagePipelineOptions {
  ReadPipelineOptions read;
  decode::TransformOptions transform;
  uint32_t batch_size = 256;
  bool drop_last = false;         // leave out a last batch smaller than batch_size
  uint32_t threads = 0;           // transform threads; 0: the CPUs this process may use
  uint32_t prefetch_batches = 0;  // batches made ahead of the consumer; 0: 2
  uint64_t seed = 0, epoch = 0;   // augmentation randomness (with each sample's index)
  ErrorPolicy on_error = ErrorPolicy::kRaise;
  // The member holding a sample's image: the file whose name ends in "." + image_member (a
  // column dataset's image column). Empty: the only file, or the first with an image extension.
  std::string image_member;
  // The member holding a sample's label, a decimal int (a column dataset's int column other
  // than its label column); a sample without it is unlabelled (-1). Empty: the metadata's label.
  std::string label_member;
  // >= 0: make the batches on this CUDA device (device_batches.h); -1: on the CPU.
  int cuda_device = -1;
  uint32_t gpu_threads = 0;   // host threads driving the GPU, each a batch in flight; 0: 2
  FeederPoolOptions feeders;  // the CPU path only; each source then needs its `uri`
  Status Validate() const;
};

struct SampleError {
  uint64_t position = 0;  // in the plan (of all sources: in `order`)
  uint32_t sample = 0;
  uint16_t source = 0;
  Status status;  // names the sample's path
};

struct ImageBatch {
  // count * transform.output.sample_bytes() bytes, 64-byte aligned; recycled when released.
  // In device memory when `device` >= 0 (the CUDA device's ordinal).
  std::shared_ptr<std::byte> images;
  int device = -1;
  uint32_t count = 0;               // images in the batch
  uint32_t consumed = 0;            // plan positions the batch covers: count + left out
  std::vector<int64_t> labels;      // per image (-1: unlabelled)
  std::vector<uint32_t> samples;    // per image: sample index in the dataset
  std::vector<uint16_t> sources;    // per image: its source (0 with one source)
  std::vector<SampleError> errors;  // skipped samples (kSkip)
  // Samples left out as no image at all (a README.txt in a file dataset: no JPEG or PNG
  // signature, no image extension), whatever on_error says, as torchvision's ImageFolder does.
  std::vector<SampleError> not_images;
  // How long Next() waited for this batch (the consumer was starved), and how much of that the
  // dispatcher spent waiting for this batch's samples from the read pipeline: the rest waited
  // for decoding (issue 17's stall attribution), or, in feeder_waited_seconds, for slices of it
  // that feeders were making.
  double waited_seconds = 0;
  double read_waited_seconds = 0;
  double feeder_waited_seconds = 0;
};

// One feeder, as a pipeline saw it.
struct FeederStats {
  std::string address;  // host:port
  uint64_t slices = 0, samples = 0, pixel_bytes = 0;
  uint64_t failures = 0;   // slices it failed (made again elsewhere)
  uint64_t late = 0;       // answers that came after a hedged copy was made: not used
  double seconds = 0;      // the round trips of the slices it made, summed
  uint32_t in_flight = 0;  // slices it is making now
  bool reachable = false;  // its last connection or answer succeeded
};

struct ImagePipelineStats {
  uint64_t samples = 0, batches = 0, skipped = 0;
  uint64_t not_images = 0;           // left out as no image (ImageBatch::not_images)
  double read_wait_seconds = 0;      // dispatcher waiting for the read pipeline (I/O-bound)
  double decode_seconds = 0;         // summed over transform threads: decode (incl. header)
  double resize_seconds = 0;         // crop/resize/rotate
  double output_seconds = 0;         // flip + normalize + layout into the batch
  double idle_seconds = 0;           // transform threads waiting for work
  double gpu_seconds = 0;            // the GPU thread making batches (cuda_device only)
  double consumer_wait_seconds = 0;  // Next() waiting for a batch (training waited for data)
  double feeder_wait_seconds = 0;    // the part of it spent on slices feeders were making
  uint32_t threads = 0;
  ReadPipelineStats read;
  // With feeders: slices made here (redone ones included), slices made again (here or by
  // another feeder) after a feeder failed them, and each feeder's counters.
  // hedged_slices: copies offered because a feeder was slower than its hedge deadline.
  uint64_t local_slices = 0, redone_slices = 0, hedged_slices = 0;
  std::vector<FeederStats> feeders;
};

// One dataset of a pipeline and the samples it contributes, in the order they are taken.
struct ImageSource {
  std::shared_ptr<const Dataset> dataset;
  std::vector<uint32_t> plan;
  uint64_t memory_budget_bytes = 0;  // its read pipeline's; 0: options.read's
  std::string uri;                   // how a feeder opens the dataset (options.feeders only)
};

class ImagePipeline {
 public:
  static Result<std::unique_ptr<ImagePipeline>> Start(std::shared_ptr<const Dataset> dataset,
                                                      std::vector<uint32_t> plan,
                                                      const ImagePipelineOptions& options);
  // Position p of the batches' sequence is the next sample of sources[order[p]]; `order`
  // names each source as many times as its plan is long.
  static Result<std::unique_ptr<ImagePipeline>> Start(std::vector<ImageSource> sources,
                                                      std::vector<uint16_t> order,
                                                      const ImagePipelineOptions& options);
  ~ImagePipeline();  // stops the threads; batches already handed out stay valid

  // The next batch in plan order (blocking), nullopt after the last. An error: a sample failed
  // under kRaise (the message names it), or the read pipeline failed; later calls repeat it.
  Result<std::optional<ImageBatch>> Next();

  ImagePipelineStats stats() const;

  struct State;

 private:
  explicit ImagePipeline(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

// The transform threads a pipeline uses when options.threads is 0.
uint32_t DefaultTransformThreads();

}  // namespace stoker::loader
