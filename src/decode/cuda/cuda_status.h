// A CUDA runtime error as a Status, naming the step that failed: out of device memory is
// ResourceExhausted (the caller may retry with less), anything else Internal.
#pragma once

#include <cuda_runtime_api.h>

#include <fmt/format.h>

#include "stoker/status.h"

namespace stoker::decode::cuda {

inline Status FromCuda(cudaError_t e, const char* step) {
  if (e == cudaSuccess) return Status::OK();
  if (e == cudaErrorMemoryAllocation) {
    return Status::ResourceExhausted(fmt::format("CUDA {}: out of device memory", step));
  }
  return Status::Internal(fmt::format("CUDA {}: {}", step, cudaGetErrorString(e)));
}

}  // namespace stoker::decode::cuda
