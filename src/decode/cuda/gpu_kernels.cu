// The two resampling kernels: thin wrappers that map threads to pixels and call the arithmetic
// in gpu_kernels.h. One launch per pass covers the whole batch (grid z = sample), so a batch
// costs two launches however many images it holds.
#include "decode/cuda/gpu_kernels.h"

namespace stoker::decode::cuda {
namespace {

constexpr int kBlockX = 32, kBlockY = 8;

// Threads beyond their sample's temp image return at once: samples' temp images differ in
// size, and the grid covers the largest.
__global__ void FirstPassKernel(const ResampleJob* jobs) {
  const ResampleJob& job = jobs[blockIdx.z];
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= job.temp_width || y >= job.temp_height) return;
  FirstPassPixel(job, x, y);
}

__global__ void SecondPassKernel(const ResampleJob* jobs, OutputFormat out) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= static_cast<int>(out.width) || y >= static_cast<int>(out.height)) return;
  SecondPassPixel(jobs[blockIdx.z], out, x, y);
}

unsigned Blocks(uint32_t extent, int block) { return (extent + block - 1) / block; }

}  // namespace

cudaError_t LaunchResample(const ResampleJob* device_jobs, int count, int max_temp_width,
                           int max_temp_height, const OutputFormat& out, cudaStream_t stream) {
  if (count <= 0 || out.width == 0 || out.height == 0) return cudaSuccess;
  if (count > 65535) return cudaErrorInvalidValue;  // grid z limit
  const dim3 block(kBlockX, kBlockY);
  if (max_temp_width > 0 && max_temp_height > 0) {
    const dim3 grid(Blocks(uint32_t(max_temp_width), kBlockX),
                    Blocks(uint32_t(max_temp_height), kBlockY), count);
    FirstPassKernel<<<grid, block, 0, stream>>>(device_jobs);
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  const dim3 grid(Blocks(out.width, kBlockX), Blocks(out.height, kBlockY), count);
  SecondPassKernel<<<grid, block, 0, stream>>>(device_jobs, out);
  return cudaGetLastError();
}

}  // namespace stoker::decode::cuda
