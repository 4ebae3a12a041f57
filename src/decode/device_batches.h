// Batches made on a GPU: the decode/transform stage of ImagePipeline when options.cuda_device
// is set (stoker.ImageLoader(device="cuda"), issue 17). JPEGs are decoded by nvJPEG and
// cropped, resized, flipped and normalized by CUDA kernels straight into a device buffer that
// becomes the batch (decode/cuda/gpu_transform.h); what the GPU path does not take (PNG, CMYK,
// rotation, zoom, ...) is transformed on the CPU as always and uploaded into its slot. The
// pipeline's threads, order, error policy and buffer recycling are the CPU path's.
//
// In a build without CUDA (STOKER_CUDA=OFF, the default) Create() says so, and nothing here
// needs CUDA to compile or link: device_batches_none.cc stands in for cuda/device_batches.cc.
//
// Thread-safety: Run() from one thread at a time (a GPU thread of the pipeline owns a maker);
// the rest from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "decode/transform.h"
#include "stoker/status.h"

namespace stoker::decode {

struct DeviceSample {
  std::span<const std::byte> bytes;  // the encoded image (host memory)
  uint64_t sample_seed = 0;          // AugmentSeed(...), as the CPU path's
  SampleParams params;               // ChooseParams(transform, width, height, seed)
  uint32_t slot = 0;                 // its place in the batch buffer
};

class DeviceBatchMaker {
 public:
  // Unsupported when stoker was built without CUDA, when there is no such CUDA device, or for
  // options the GPU path refuses as a whole (nearest interpolation); the message says which.
  // Batch buffers hold batch_bytes; at most max_free_buffers released ones are kept for reuse.
  static Result<std::unique_ptr<DeviceBatchMaker>> Create(const TransformOptions& transform,
                                                          int device, size_t batch_bytes,
                                                          size_t max_free_buffers);
  virtual ~DeviceBatchMaker() = default;

  // Whether the GPU decodes this sample; the others are transformed on the CPU (by the
  // pipeline's decode threads) and uploaded with Upload().
  virtual bool Decodes(std::span<const std::byte> bytes, const SampleParams& params) const = 0;

  // A device buffer of batch_bytes, back to the pool when the last reference goes (e.g. from
  // a torch tensor's destructor in another thread).
  virtual Result<std::shared_ptr<std::byte>> Acquire() = 0;

  // Writes each sample to its slot of `batch` (device memory) and returns when done: one Status
  // per sample, OK or the sample's error (its slot untouched). Samples the GPU turns down after
  // all (a 12-bit or arithmetic-coded JPEG) are transformed on the CPU here. An error instead:
  // the GPU failed for the whole batch.
  virtual Result<std::vector<Status>> Run(std::span<const DeviceSample> samples,
                                          std::byte* batch) = 0;

  // Copies `host` to device memory at `device`.
  virtual Status Upload(std::byte* device, std::span<const std::byte> host) = 0;
  // Copies `bytes` between two device regions that do not overlap.
  virtual Status Move(std::byte* dst, const std::byte* src, size_t bytes) = 0;

  virtual bool hardware_decoder() const = 0;
};

// Copies device memory to `host` (tests and tools that look at a GPU batch's bytes).
Status CopyToHost(int device, const std::byte* src, std::span<std::byte> host);

// CUDA devices this process can use (0 without a driver or a CUDA build).
int CudaDeviceCount();
// Whether this build has the GPU path (STOKER_CUDA=ON).
bool BuiltWithCuda();

}  // namespace stoker::decode
