// decode/device_batches.h with CUDA (STOKER_CUDA=ON): cuda::GpuBatchTransformer for the JPEGs
// it takes, Transformer (CPU) for the samples it turns down, cudaMalloc'ed batch
// buffers recycled through a small pool.
#include <cuda_runtime_api.h>

#include <mutex>
#include <utility>

#include <fmt/format.h>

#include "decode/cuda/cuda_status.h"
#include "decode/cuda/gpu_transform.h"
#include "decode/cuda/jpeg_markers.h"
#include "decode/device_batches.h"

namespace stoker::decode {
namespace {

using cuda::FromCuda;

// Released batch buffers kept for reuse. Buffers may outlive the pool inside tensors; they are
// then freed directly.
class DevicePool : public std::enable_shared_from_this<DevicePool> {
 public:
  DevicePool(int device, size_t bytes, size_t max_free)
      : device_(device), bytes_(bytes), max_free_(max_free) {}
  ~DevicePool() {
    for (void* p : free_) Free(device_, p);
  }

  Result<std::shared_ptr<std::byte>> Acquire() {
    void* p = nullptr;
    {
      std::lock_guard lock(mu_);
      if (!free_.empty()) {
        p = free_.back();
        free_.pop_back();
      }
    }
    if (p == nullptr) {
      STOKER_RETURN_IF_ERROR(FromCuda(cudaSetDevice(device_), "set device"));
      // At least one byte, so an empty batch still has an address.
      STOKER_RETURN_IF_ERROR(FromCuda(cudaMalloc(&p, std::max<size_t>(bytes_, 1)), "malloc"));
    }
    return std::shared_ptr<std::byte>(static_cast<std::byte*>(p),
                                      [pool = weak_from_this(), device = device_](std::byte* q) {
                                        if (auto self = pool.lock()) {
                                          self->Release(q);
                                        } else {
                                          Free(device, q);
                                        }
                                      });
  }

 private:
  static void Free(int device, void* p) {
    // At exit the CUDA context may be gone already: nothing left to free then.
    if (cudaSetDevice(device) == cudaSuccess) (void)cudaFree(p);
    (void)cudaGetLastError();
  }

  void Release(void* p) {
    {
      std::lock_guard lock(mu_);
      if (free_.size() < max_free_) {
        free_.push_back(p);
        return;
      }
    }
    Free(device_, p);
  }

  const int device_;
  const size_t bytes_, max_free_;
  std::mutex mu_;
  std::vector<void*> free_;
};

bool SameOptions(const cuda::GpuTransformOptions& a, const cuda::GpuTransformOptions& b) {
  const OutputSpec &x = a.output, &y = b.output;
  for (int c = 0; c < 3; ++c) {
    if (x.mean[c] != y.mean[c] || x.std[c] != y.std[c]) return false;
  }
  return x.width == y.width && x.height == y.height && x.dtype == y.dtype && x.layout == y.layout &&
         a.interpolation == b.interpolation && a.limits.max_pixels == b.limits.max_pixels &&
         a.limits.max_dimension == b.limits.max_dimension &&
         a.limits.max_scans == b.limits.max_scans && a.hardware_decoder == b.hardware_decoder &&
         a.device == b.device;
}

// What a pipeline leaves for the next one. A loader starts a pipeline every pass, and setting
// up nvJPEG's hardware decoder and allocating batch buffers (cudaMalloc, and cudaFree, which
// waits for the whole device, training included) took ~0.1-1 s each time: idle transformers and
// the last pool of each batch size are kept, as PyTorch's caching allocator keeps freed
// memory. Never destroyed: at exit the CUDA context may go before static destructors run.
class Idle {
 public:
  static Idle& Get() {
    static auto* idle = new Idle;
    return *idle;
  }

  std::unique_ptr<cuda::GpuBatchTransformer> TakeTransformer(
      const cuda::GpuTransformOptions& options) {
    std::lock_guard lock(mu_);
    for (auto it = transformers_.begin(); it != transformers_.end(); ++it) {
      if (SameOptions(it->first, options)) {
        auto t = std::move(it->second);
        transformers_.erase(it);
        return t;
      }
    }
    return nullptr;
  }

  void PutTransformer(const cuda::GpuTransformOptions& options,
                      std::unique_ptr<cuda::GpuBatchTransformer> t) {
    std::lock_guard lock(mu_);
    if (transformers_.size() >= kMaxTransformers) transformers_.erase(transformers_.begin());
    transformers_.emplace_back(options, std::move(t));
  }

  // The pool of (device, bytes) pipelines share, made if there is none.
  std::shared_ptr<DevicePool> Pool(int device, size_t bytes, size_t max_free) {
    std::lock_guard lock(mu_);
    for (const Kept& k : pools_) {
      if (k.device == device && k.bytes == bytes) return k.pool;
    }
    if (pools_.size() >= kMaxPools) pools_.erase(pools_.begin());
    pools_.push_back({device, bytes, std::make_shared<DevicePool>(device, bytes, max_free)});
    return pools_.back().pool;
  }

 private:
  static constexpr size_t kMaxTransformers = 16, kMaxPools = 2;
  struct Kept {
    int device;
    size_t bytes;
    std::shared_ptr<DevicePool> pool;
  };
  std::mutex mu_;
  std::vector<std::pair<cuda::GpuTransformOptions, std::unique_ptr<cuda::GpuBatchTransformer>>>
      transformers_;
  std::vector<Kept> pools_;
};

class CudaBatchMaker final : public DeviceBatchMaker {
 public:
  CudaBatchMaker(const TransformOptions& transform, const cuda::GpuTransformOptions& options,
                 std::unique_ptr<cuda::GpuBatchTransformer> gpu, std::shared_ptr<DevicePool> pool)
      : options_(options),
        device_(options.device),
        sample_bytes_(transform.output.sample_bytes()),
        gpu_(std::move(gpu)),
        cpu_(transform),
        pool_(std::move(pool)),
        host_(sample_bytes_) {}

  ~CudaBatchMaker() override {
    if (scratch_ != nullptr && cudaSetDevice(device_) == cudaSuccess) (void)cudaFree(scratch_);
    Idle::Get().PutTransformer(options_, std::move(gpu_));
  }

  bool Decodes(std::span<const std::byte> bytes, const SampleParams& params) const override {
    return cuda::LooksLikeJpeg(bytes) && params.angle == 0 && params.zoom == 1;
  }

  Result<std::shared_ptr<std::byte>> Acquire() override { return pool_->Acquire(); }

  Result<std::vector<Status>> Run(std::span<const DeviceSample> samples,
                                  std::byte* batch) override {
    std::vector<cuda::GpuSample> gpu_samples;
    gpu_samples.reserve(samples.size());
    bool in_place = true;  // sample i goes to slot i: the GPU writes the batch directly
    for (size_t i = 0; i < samples.size(); ++i) {
      gpu_samples.push_back({samples[i].bytes, samples[i].params});
      in_place = in_place && samples[i].slot == i;
    }
    STOKER_RETURN_IF_ERROR(FromCuda(cudaSetDevice(device_), "set device"));
    std::byte* dst = batch;
    if (!in_place) {
      STOKER_RETURN_IF_ERROR(ReserveScratch(samples.size() * sample_bytes_));
      dst = scratch_;
    }
    STOKER_ASSIGN_OR_RETURN(std::vector<Status> status, gpu_->Run(gpu_samples, dst));
    for (size_t i = 0; i < samples.size(); ++i) {
      std::byte* slot = batch + size_t{samples[i].slot} * sample_bytes_;
      if (status[i].IsUnsupported()) {
        status[i] = cpu_.Run(samples[i].bytes, samples[i].sample_seed, host_.data());
        if (status[i].ok()) status[i] = Upload(slot, host_);
      } else if (status[i].ok() && !in_place) {
        STOKER_RETURN_IF_ERROR(Move(slot, dst + i * sample_bytes_, sample_bytes_));
      }
    }
    return status;
  }

  Status Upload(std::byte* device, std::span<const std::byte> host) override {
    STOKER_RETURN_IF_ERROR(FromCuda(cudaSetDevice(device_), "set device"));
    return FromCuda(cudaMemcpy(device, host.data(), host.size(), cudaMemcpyHostToDevice), "upload");
  }

  Status Move(std::byte* dst, const std::byte* src, size_t bytes) override {
    STOKER_RETURN_IF_ERROR(FromCuda(cudaSetDevice(device_), "set device"));
    return FromCuda(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice), "copy");
  }

  bool hardware_decoder() const override { return gpu_->hardware_decoder(); }

 private:
  Status ReserveScratch(size_t bytes) {
    if (bytes <= scratch_bytes_) return Status::OK();
    if (scratch_ != nullptr) (void)cudaFree(scratch_);
    scratch_ = nullptr;
    scratch_bytes_ = 0;
    void* p = nullptr;
    STOKER_RETURN_IF_ERROR(FromCuda(cudaMalloc(&p, bytes), "malloc"));
    scratch_ = static_cast<std::byte*>(p);
    scratch_bytes_ = bytes;
    return Status::OK();
  }

  const cuda::GpuTransformOptions options_;
  const int device_;
  const size_t sample_bytes_;
  std::unique_ptr<cuda::GpuBatchTransformer> gpu_;
  Transformer cpu_;  // the samples the GPU turns down in Run
  std::shared_ptr<DevicePool> pool_;
  std::vector<std::byte> host_;   // one sample's output from cpu_, on its way up
  std::byte* scratch_ = nullptr;  // Run's output when samples do not fill slots 0..n-1
  size_t scratch_bytes_ = 0;
};

}  // namespace

Result<std::unique_ptr<DeviceBatchMaker>> DeviceBatchMaker::Create(
    const TransformOptions& transform, int device, size_t batch_bytes, size_t max_free_buffers) {
  const int devices = cuda::CudaDeviceCount();
  if (device < 0 || device >= devices) {
    return Err(Status::Unsupported(
        devices == 0
            ? std::string("no CUDA device is visible to this process (no NVIDIA driver, "
                          "no GPU, or CUDA_VISIBLE_DEVICES hides them)")
            : fmt::format("there is no CUDA device {} (this process sees {})", device, devices)));
  }
  cuda::GpuTransformOptions options;
  options.output = transform.output;
  options.interpolation = transform.interpolation;
  options.limits = transform.limits;
  options.device = device;
  std::unique_ptr<cuda::GpuBatchTransformer> gpu = Idle::Get().TakeTransformer(options);
  if (gpu == nullptr) {
    STOKER_ASSIGN_OR_RETURN(gpu, cuda::GpuBatchTransformer::Create(options));
  }
  std::shared_ptr<DevicePool> pool = Idle::Get().Pool(device, batch_bytes, max_free_buffers);
  return std::unique_ptr<DeviceBatchMaker>(
      new CudaBatchMaker(transform, options, std::move(gpu), std::move(pool)));
}

Status CopyToHost(int device, const std::byte* src, std::span<std::byte> host) {
  STOKER_RETURN_IF_ERROR(FromCuda(cudaSetDevice(device), "set device"));
  return FromCuda(cudaMemcpy(host.data(), src, host.size(), cudaMemcpyDeviceToHost), "download");
}

int CudaDeviceCount() { return cuda::CudaDeviceCount(); }
bool BuiltWithCuda() { return true; }

}  // namespace stoker::decode
