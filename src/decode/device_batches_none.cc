// device_batches.h in a build without CUDA (STOKER_CUDA=OFF): there is no GPU path to use.
#include "decode/device_batches.h"

namespace stoker::decode {

Result<std::unique_ptr<DeviceBatchMaker>> DeviceBatchMaker::Create(
    const TransformOptions& /*transform*/, int /*device*/, size_t /*batch_bytes*/,
    size_t /*max_free_buffers*/) {
  return Err(Status::Unsupported(
      "this stoker was built without the GPU path (STOKER_CUDA=OFF): build it with CUDA and "
      "nvJPEG (docs/gpu.md), or decode on the CPU"));
}

Status CopyToHost(int /*device*/, const std::byte* /*src*/, std::span<std::byte> /*host*/) {
  return Status::Unsupported("this stoker was built without the GPU path (STOKER_CUDA=OFF)");
}

int CudaDeviceCount() { return 0; }
bool BuiltWithCuda() { return false; }

}  // namespace stoker::decode
