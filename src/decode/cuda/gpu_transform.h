// The GPU twin of decode::Transformer, a batch at a time: JPEGs decoded by nvJPEG (only the
// region each sample's box needs), resampled box -> output size with the CPU Resizer's
// coefficients (Pillow's antialiased bilinear or bicubic), flipped, normalized and written as
// NCHW/NHWC float32/uint8 into one device buffer holding the batch.
//
// It agrees with decode::Transformer run with dct_scaling off and the same SampleParams: the
// geometry and the resampling arithmetic are the CPU path's (resample_plan.h, gpu_kernels.h),
// so the pixels differ only as far as nvJPEG's decode differs from libjpeg-turbo's (IDCT and
// chroma upsampling rounding; gpu_transform_test bounds it).
//
// What stays on the CPU: samples that are not JPEG (PNG), JPEGs this path does not decode
// (12-bit, lossless, arithmetic, CMYK, unusual subsampling), rotation and zoom, and nearest
// interpolation. Those samples come back Unsupported — per sample, never failing the batch —
// and the caller runs decode::Transformer for them.
//
// Thread-safety: one GpuBatchTransformer per thread; it owns a CUDA stream, nvJPEG state and
// device buffers reused from batch to batch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include <cuda_runtime_api.h>

#include "decode/output.h"
#include "decode/resize.h"
#include "decode/transform.h"
#include "stoker/status.h"

namespace stoker::decode::cuda {

// CUDA devices this process can use: 0 when there are none or no driver (the CUDA runtime's
// cudaErrorNoDevice / cudaErrorInsufficientDriver), so callers and tests can fall back.
int CudaDeviceCount();

struct GpuTransformOptions {
  OutputSpec output;  // size, dtype, layout, mean/std, as for the CPU path
  Interpolation interpolation = Interpolation::kBilinear;  // kBilinear or kBicubic
  DecodeLimits limits;
  bool hardware_decoder = true;  // nvJPEG's hardware decoder where the GPU has one
  int device = 0;                // CUDA device ordinal
  Status Validate() const;
};

struct GpuSample {
  std::span<const std::byte> bytes;  // the encoded image (host memory)
  SampleParams params;               // e.g. from decode::ChooseParams
};

class GpuBatchTransformer {
 public:
  // Unsupported when there is no usable CUDA device; InvalidArgument for bad options.
  static Result<std::unique_ptr<GpuBatchTransformer>> Create(const GpuTransformOptions& options);
  ~GpuBatchTransformer();
  GpuBatchTransformer(const GpuBatchTransformer&) = delete;
  GpuBatchTransformer& operator=(const GpuBatchTransformer&) = delete;

  // Writes sample i to (std::byte*)device_dst + i * output.sample_bytes() (device memory
  // holding samples.size() slots) and returns when the batch is done. The vector holds one
  // Status per sample: OK (slot written), Unsupported (decode it on the CPU), or the sample's
  // error (InvalidArgument, ResourceExhausted, ...; the message does not name the sample). Failed
  // samples' slots are left as they were. An error instead of the vector: the GPU failed for
  // the whole batch (every slot is then unspecified).
  Result<std::vector<Status>> Run(std::span<const GpuSample> samples, void* device_dst);

  bool hardware_decoder() const;
  cudaStream_t stream() const;

  struct Impl;

 private:
  explicit GpuBatchTransformer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker::decode::cuda
