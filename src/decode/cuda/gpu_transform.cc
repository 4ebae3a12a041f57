// See gpu_transform.h. A batch goes: host checks and planning per sample -> nvJPEG decodes of
// the regions into one device arena -> one upload of every sample's coefficients and job ->
// two kernel launches for the whole batch -> one stream synchronization. Buffers only grow, so
// a steady stream of batches allocates nothing.
#include "decode/cuda/gpu_transform.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "decode/cuda/cuda_status.h"
#include "decode/cuda/gpu_kernels.h"
#include "decode/cuda/nvjpeg_decoder.h"
#include "decode/cuda/resample_plan.h"

namespace stoker::decode::cuda {
namespace {

constexpr size_t kAlign = 256;  // cudaMalloc's alignment, kept for every sub-buffer

size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Device (or pinned host) memory that grows and never shrinks.
template <cudaError_t (*Alloc)(void**, size_t), cudaError_t (*Free)(void*)>
class Buffer {
 public:
  Buffer() = default;
  ~Buffer() {
    if (data_ != nullptr) (void)Free(data_);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Status Reserve(size_t bytes, const char* what) {
    if (bytes <= size_) return Status::OK();
    if (data_ != nullptr) (void)Free(data_);
    data_ = nullptr;
    size_ = 0;
    const size_t want = std::max(bytes, size_ + size_ / 2);
    STOKER_RETURN_IF_ERROR(FromCuda(Alloc(&data_, want), what));
    size_ = want;
    return Status::OK();
  }
  std::byte* data() const { return static_cast<std::byte*>(data_); }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

cudaError_t DeviceAlloc(void** p, size_t n) { return cudaMalloc(p, n); }
cudaError_t PinnedAlloc(void** p, size_t n) { return cudaMallocHost(p, n); }
using DeviceBuffer = Buffer<DeviceAlloc, cudaFree>;
using PinnedBuffer = Buffer<PinnedAlloc, cudaFreeHost>;

// One sample on its way through the batch.
struct Planned {
  size_t index = 0;  // in the batch
  SampleGeometry geometry;
  ResamplePlan plan;
  size_t decoded_at = 0, temp_at = 0, plan_at = 0;  // byte offsets into the arenas
};

size_t PlanBytes(const ResamplePlan& p) {
  const size_t ints = 2 * p.horizontal.start.size() + p.horizontal.coefs.size() +
                      2 * p.vertical.start.size() + p.vertical.coefs.size();
  return AlignUp(ints * sizeof(int32_t));
}

// Copies one axis's arrays to `host` and points the job's fields at their device twins.
void PackAxis(const AxisPlan& axis, std::byte*& host, const std::byte*& device,
              const int32_t*& start, const int32_t*& taps, const int32_t*& coefs, int32_t& stride) {
  const auto put = [&](const std::vector<int32_t>& v, const int32_t*& field) {
    std::memcpy(host, v.data(), v.size() * sizeof(int32_t));
    field = reinterpret_cast<const int32_t*>(device);
    host += v.size() * sizeof(int32_t);
    device += v.size() * sizeof(int32_t);
  };
  put(axis.start, start);
  put(axis.taps, taps);
  put(axis.coefs, coefs);
  stride = axis.stride;
}

}  // namespace

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or no device: clear the error, report none
    return 0;
  }
  return count;
}

Status GpuTransformOptions::Validate() const {
  if (output.width == 0 || output.height == 0) {
    return Status::InvalidArgument("the output size must be at least 1x1");
  }
  for (int c = 0; c < 3; ++c) {
    if (!(output.std[c] != 0 && std::isfinite(output.std[c]) && std::isfinite(output.mean[c]))) {
      return Status::InvalidArgument("std must be finite and non-zero, mean finite");
    }
  }
  if (interpolation != Interpolation::kBilinear && interpolation != Interpolation::kBicubic) {
    return Status::Unsupported("the GPU path resamples bilinear or bicubic only");
  }
  return Status::OK();
}

struct GpuBatchTransformer::Impl {
  GpuTransformOptions options;
  OutputFormat format;
  cudaStream_t stream = nullptr;
  std::unique_ptr<NvjpegDecoder> decoder;
  DeviceBuffer decoded, temp, plans;
  PinnedBuffer staging;  // jobs and coefficients on their way to `plans`

  ~Impl() {
    decoder.reset();  // synchronizes the stream
    if (stream != nullptr) (void)cudaStreamDestroy(stream);
  }

  Result<Planned> Plan(size_t index, const GpuSample& sample);
  Status Resample(std::span<const GpuSample> samples, const std::vector<Planned>& done,
                  size_t job_bytes, size_t plan_bytes, std::byte* dst);
};

Result<Planned> GpuBatchTransformer::Impl::Plan(size_t index, const GpuSample& sample) {
  if (!LooksLikeJpeg(sample.bytes)) {
    return Err(Status::Unsupported("not a JPEG (decode it on the CPU)"));
  }
  if (sample.params.angle != 0 || sample.params.zoom != 1) {
    return Err(Status::Unsupported("rotation and zoom run on the CPU only"));
  }
  STOKER_ASSIGN_OR_RETURN(const JpegHeader header,
                          decoder->ReadHeader(sample.bytes, options.limits));
  Planned p;
  p.index = index;
  p.geometry = PlanGeometry(header.width, header.height, sample.params, options.interpolation,
                            format.width, format.height);
  p.plan = PlanResample(p.geometry.view.width, p.geometry.view.height, p.geometry.box,
                        options.interpolation, format.width, format.height);
  return p;
}

Status GpuBatchTransformer::Impl::Resample(std::span<const GpuSample> samples,
                                           const std::vector<Planned>& done, size_t job_bytes,
                                           size_t plan_bytes, std::byte* dst) {
  STOKER_RETURN_IF_ERROR(staging.Reserve(job_bytes + plan_bytes, "pinned staging"));
  STOKER_RETURN_IF_ERROR(plans.Reserve(job_bytes + plan_bytes, "coefficients"));
  auto* jobs = reinterpret_cast<ResampleJob*>(staging.data());
  int max_temp_width = 0, max_temp_height = 0;
  for (size_t j = 0; j < done.size(); ++j) {
    const Planned& p = done[j];
    ResampleJob& job = jobs[j];
    job = ResampleJob{};
    const size_t pitch = LayoutFor(p.geometry.roi.width, p.geometry.roi.height).pitch;
    const PixelRect& view = p.geometry.view;
    job.src = reinterpret_cast<const uint8_t*>(decoded.data() + p.decoded_at) +
              (size_t{view.y} + p.plan.first_row) * pitch + (size_t{view.x} + p.plan.first_col) * 3;
    job.src_stride = pitch;
    std::byte* host = staging.data() + job_bytes + p.plan_at;
    const std::byte* device = plans.data() + job_bytes + p.plan_at;
    PackAxis(p.plan.horizontal, host, device, job.h_start, job.h_taps, job.h_coefs, job.h_stride);
    PackAxis(p.plan.vertical, host, device, job.v_start, job.v_taps, job.v_coefs, job.v_stride);
    job.vertical_first = p.plan.vertical_first ? 1 : 0;
    job.temp = reinterpret_cast<uint8_t*>(temp.data() + p.temp_at);
    job.temp_width = int32_t(p.plan.temp_width(format.width));
    job.temp_height = int32_t(p.plan.temp_height(format.height));
    job.dst = dst + p.index * options.output.sample_bytes();
    job.flip = samples[p.index].params.flip ? 1 : 0;
    max_temp_width = std::max(max_temp_width, job.temp_width);
    max_temp_height = std::max(max_temp_height, job.temp_height);
  }
  STOKER_RETURN_IF_ERROR(
      FromCuda(cudaMemcpyAsync(plans.data(), staging.data(), job_bytes + plan_bytes,
                               cudaMemcpyHostToDevice, stream),
               "upload"));
  return FromCuda(LaunchResample(reinterpret_cast<const ResampleJob*>(plans.data()),
                                 int(done.size()), max_temp_width, max_temp_height, format, stream),
                  "resample launch");
}

GpuBatchTransformer::GpuBatchTransformer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GpuBatchTransformer::~GpuBatchTransformer() = default;

Result<std::unique_ptr<GpuBatchTransformer>> GpuBatchTransformer::Create(
    const GpuTransformOptions& options) {
  STOKER_RETURN_IF_ERROR(options.Validate());
  if (options.device < 0 || options.device >= CudaDeviceCount()) {
    return Err(Status::Unsupported(fmt::format("no CUDA device {}", options.device)));
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->format = FormatFor(options.output);
  STOKER_RETURN_IF_ERROR(FromCuda(cudaSetDevice(options.device), "set device"));
  STOKER_RETURN_IF_ERROR(
      FromCuda(cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking), "stream"));
  NvjpegDecoder::Options decoder_options;
  decoder_options.hardware = options.hardware_decoder;
  STOKER_ASSIGN_OR_RETURN(impl->decoder, NvjpegDecoder::Create(impl->stream, decoder_options));
  return std::unique_ptr<GpuBatchTransformer>(new GpuBatchTransformer(std::move(impl)));
}

bool GpuBatchTransformer::hardware_decoder() const { return impl_->decoder->hardware(); }
cudaStream_t GpuBatchTransformer::stream() const { return impl_->stream; }

Result<std::vector<Status>> GpuBatchTransformer::Run(std::span<const GpuSample> samples,
                                                     void* device_dst) {
  Impl& d = *impl_;
  if (device_dst == nullptr && !samples.empty()) {
    return Err(Status::InvalidArgument("no device buffer for the batch's output"));
  }
  STOKER_RETURN_IF_ERROR(FromCuda(cudaSetDevice(d.options.device), "set device"));
  std::vector<Status> statuses(samples.size());

  // Host: checks, geometry and coefficients; the arenas' layout.
  std::vector<Planned> planned;
  size_t decoded_bytes = 0, temp_bytes = 0, plan_bytes = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    Result<Planned> p = d.Plan(i, samples[i]);
    if (!p.has_value()) {
      statuses[i] = std::move(p).error();
      continue;
    }
    const PixelRect& roi = p->geometry.roi;
    p->decoded_at = decoded_bytes;
    decoded_bytes += AlignUp(LayoutFor(roi.width, roi.height).bytes);
    p->temp_at = temp_bytes;
    temp_bytes += AlignUp(size_t{p->plan.temp_width(d.format.width)} *
                          p->plan.temp_height(d.format.height) * 3);
    p->plan_at = plan_bytes;
    plan_bytes += PlanBytes(p->plan);
    planned.push_back(std::move(*p));
  }
  if (planned.empty()) return statuses;
  STOKER_RETURN_IF_ERROR(d.decoded.Reserve(decoded_bytes, "decode buffer"));
  STOKER_RETURN_IF_ERROR(d.temp.Reserve(temp_bytes, "resample buffer"));

  // Decode every region into the arena.
  std::vector<RoiDecode> requests(planned.size());
  for (size_t j = 0; j < planned.size(); ++j) {
    const Planned& p = planned[j];
    const PixelRect& roi = p.geometry.roi;
    requests[j] = {samples[p.index].bytes,
                   roi.x,
                   roi.y,
                   roi.width,
                   roi.height,
                   reinterpret_cast<uint8_t*>(d.decoded.data() + p.decoded_at),
                   LayoutFor(roi.width, roi.height).pitch};
  }
  std::vector<Status> decoded(planned.size());
  d.decoder->Decode(requests, decoded);
  std::vector<Planned> done;
  for (size_t j = 0; j < planned.size(); ++j) {
    if (decoded[j].ok()) {
      done.push_back(std::move(planned[j]));
    } else {
      statuses[planned[j].index] = std::move(decoded[j]);
    }
  }

  // Resample, flip, normalize, write: two launches for the batch.
  if (!done.empty()) {
    const size_t job_bytes = AlignUp(done.size() * sizeof(ResampleJob));
    STOKER_RETURN_IF_ERROR(
        d.Resample(samples, done, job_bytes, plan_bytes, static_cast<std::byte*>(device_dst)));
  }
  STOKER_RETURN_IF_ERROR(FromCuda(cudaStreamSynchronize(d.stream), "batch"));
  return statuses;
}

}  // namespace stoker::decode::cuda
