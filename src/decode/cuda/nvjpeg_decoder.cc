// See nvjpeg_decoder.h. Every nvJPEG and CUDA return code is checked; nvJPEG objects are owned
// by small RAII wrappers so that a failed Create leaks nothing.
#include "decode/cuda/nvjpeg_decoder.h"

#include <nvjpeg.h>

#include <utility>
#include <vector>

#include <fmt/format.h>

namespace stoker::decode::cuda {
namespace {

const char* NvjpegName(nvjpegStatus_t s) {
  switch (s) {
    case NVJPEG_STATUS_SUCCESS:
      return "success";
    case NVJPEG_STATUS_NOT_INITIALIZED:
      return "not initialized";
    case NVJPEG_STATUS_INVALID_PARAMETER:
      return "invalid parameter";
    case NVJPEG_STATUS_BAD_JPEG:
      return "bad JPEG";
    case NVJPEG_STATUS_JPEG_NOT_SUPPORTED:
      return "JPEG not supported";
    case NVJPEG_STATUS_ALLOCATOR_FAILURE:
      return "allocator failure";
    case NVJPEG_STATUS_EXECUTION_FAILED:
      return "execution failed";
    case NVJPEG_STATUS_ARCH_MISMATCH:
      return "architecture mismatch";
    case NVJPEG_STATUS_INTERNAL_ERROR:
      return "internal error";
    case NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED:
      return "implementation not supported";
    case NVJPEG_STATUS_INCOMPLETE_BITSTREAM:
      return "incomplete bitstream";
  }
  return "unknown status";
}

// The image's fault (InvalidArgument: damaged input), this path's limits (Unsupported: the CPU
// decodes it), or the GPU's (the rest). The message names the step, not the sample: the caller
// knows which it is.
Status FromNvjpeg(nvjpegStatus_t s, const char* step) {
  std::string message = fmt::format("nvJPEG {}: {}", step, NvjpegName(s));
  switch (s) {
    case NVJPEG_STATUS_SUCCESS:
      return Status::OK();
    case NVJPEG_STATUS_BAD_JPEG:
    case NVJPEG_STATUS_INCOMPLETE_BITSTREAM:
      return Status::InvalidArgument("corrupt JPEG (" + message + ")");
    case NVJPEG_STATUS_JPEG_NOT_SUPPORTED:
    case NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED:
      return Status::Unsupported(std::move(message));
    case NVJPEG_STATUS_ALLOCATOR_FAILURE:
      return Status::ResourceExhausted(std::move(message));
    default:
      return Status::Internal(std::move(message));
  }
}

Status FromCuda(cudaError_t e, const char* step) {
  if (e == cudaSuccess) return Status::OK();
  return Status::Internal(fmt::format("CUDA {}: {}", step, cudaGetErrorString(e)));
}

#define STOKER_NVJPEG(call, step)                                      \
  do {                                                                 \
    if (const nvjpegStatus_t s_ = (call); s_ != NVJPEG_STATUS_SUCCESS) \
      return FromNvjpeg(s_, step);                                     \
  } while (0)

// An nvJPEG object destroyed with `Destroy` (which returns a status we cannot act on).
template <typename T, nvjpegStatus_t (*Destroy)(T)>
class Owned {
 public:
  Owned() = default;
  ~Owned() { reset(); }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  T get() const { return object_; }
  T* out() {
    reset();
    return &object_;
  }
  void reset() {
    if (object_ != nullptr) (void)Destroy(object_);
    object_ = nullptr;
  }

 private:
  T object_ = nullptr;
};

using Handle = Owned<nvjpegHandle_t, nvjpegDestroy>;
using State = Owned<nvjpegJpegState_t, nvjpegJpegStateDestroy>;
using Stream = Owned<nvjpegJpegStream_t, nvjpegJpegStreamDestroy>;
using Decoder = Owned<nvjpegJpegDecoder_t, nvjpegDecoderDestroy>;
using Params = Owned<nvjpegDecodeParams_t, nvjpegDecodeParamsDestroy>;
using Pinned = Owned<nvjpegBufferPinned_t, nvjpegBufferPinnedDestroy>;
using Device = Owned<nvjpegBufferDevice_t, nvjpegBufferDeviceDestroy>;

// libjpeg-turbo's default chroma upsampling is "fancy" (interpolating); nvJPEG's is nearest
// unless asked, which would put 4:2:0 images several values away from the CPU path.
constexpr unsigned kHandleFlags = NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION;

}  // namespace

RegionLayout LayoutFor(uint32_t width, uint32_t height) {
  constexpr size_t kBlock = 16;
  const auto blocks = [](uint32_t n) { return (size_t{n} + kBlock - 1) / kBlock * kBlock; };
  RegionLayout l;
  l.pitch = blocks(width) * 3;
  l.bytes = l.pitch * blocks(height);
  return l;
}

struct NvjpegDecoder::Impl {
  cudaStream_t stream = nullptr;
  Handle handle;
  bool hardware = false;
  // The one-by-one path (decoupled API, hybrid backend). Two pinned buffers: the host phase of
  // one image fills one while the other's copy to the device may still be in flight.
  Decoder decoder;
  State state;
  Pinned pinned[2];
  Device device;
  Stream jpeg;
  Params params;
  // The batched hardware path: one decode-params object per image of the batch.
  State hw_state;
  std::vector<std::unique_ptr<Params>> hw_params;

  Status Init(const Options& options);
  Status SetRoi(nvjpegDecodeParams_t p, const RoiDecode& r);
  Status DecodeOne(const RoiDecode& r, int parity);
  // Decodes the requests `batch` indexes in one hardware call; false if the call failed.
  bool DecodeHardwareBatch(std::span<const RoiDecode> requests, const std::vector<size_t>& batch);
  bool HardwareSupports(const RoiDecode& r);
};

Status NvjpegDecoder::Impl::Init(const Options& options) {
  if (options.hardware && nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, nullptr, nullptr, kHandleFlags,
                                         handle.out()) == NVJPEG_STATUS_SUCCESS) {
    hardware = true;
    STOKER_NVJPEG(nvjpegJpegStateCreate(handle.get(), hw_state.out()), "hardware state");
  } else {
    // No hardware decoder (most GPUs) or not wanted: the default backend.
    STOKER_NVJPEG(
        nvjpegCreateEx(NVJPEG_BACKEND_DEFAULT, nullptr, nullptr, kHandleFlags, handle.out()),
        "create");
  }
  nvjpegHandle_t h = handle.get();
  STOKER_NVJPEG(nvjpegDecoderCreate(h, NVJPEG_BACKEND_HYBRID, decoder.out()), "decoder");
  STOKER_NVJPEG(nvjpegDecoderStateCreate(h, decoder.get(), state.out()), "decoder state");
  for (Pinned& p : pinned) {
    STOKER_NVJPEG(nvjpegBufferPinnedCreate(h, nullptr, p.out()), "pinned buffer");
  }
  STOKER_NVJPEG(nvjpegBufferDeviceCreate(h, nullptr, device.out()), "device buffer");
  STOKER_NVJPEG(nvjpegStateAttachDeviceBuffer(state.get(), device.get()), "attach buffer");
  STOKER_NVJPEG(nvjpegJpegStreamCreate(h, jpeg.out()), "stream");
  STOKER_NVJPEG(nvjpegDecodeParamsCreate(h, params.out()), "params");
  return Status::OK();
}

Status NvjpegDecoder::Impl::SetRoi(nvjpegDecodeParams_t p, const RoiDecode& r) {
  STOKER_NVJPEG(nvjpegDecodeParamsSetOutputFormat(p, NVJPEG_OUTPUT_RGBI), "output format");
  STOKER_NVJPEG(nvjpegDecodeParamsSetROI(p, int(r.x), int(r.y), int(r.width), int(r.height)),
                "region of interest");
  return Status::OK();
}

Status NvjpegDecoder::Impl::DecodeOne(const RoiDecode& r, int parity) {
  nvjpegHandle_t h = handle.get();
  const auto* data = reinterpret_cast<const unsigned char*>(r.bytes.data());
  if (Status s = SetRoi(params.get(), r); !s.ok()) return s;
  STOKER_NVJPEG(nvjpegJpegStreamParse(h, data, r.bytes.size(), 0, 0, jpeg.get()), "parse");
  int supported = -1;  // nvJPEG: 0 means supported
  STOKER_NVJPEG(nvjpegDecoderJpegSupported(decoder.get(), jpeg.get(), params.get(), &supported),
                "support check");
  if (supported != 0) return Status::Unsupported("nvJPEG cannot decode this JPEG");
  STOKER_NVJPEG(nvjpegStateAttachPinnedBuffer(state.get(), pinned[parity].get()), "attach");
  STOKER_NVJPEG(nvjpegDecodeJpegHost(h, decoder.get(), state.get(), params.get(), jpeg.get()),
                "host decode");
  // The previous image's copy out of the other pinned buffer, and its device phase, must be
  // done before this image's transfer reuses the state's device buffer.
  if (Status s = FromCuda(cudaStreamSynchronize(stream), "synchronize"); !s.ok()) return s;
  STOKER_NVJPEG(nvjpegDecodeJpegTransferToDevice(h, decoder.get(), state.get(), jpeg.get(), stream),
                "transfer");
  nvjpegImage_t out{};
  out.channel[0] = r.dst;
  out.pitch[0] = r.pitch;
  STOKER_NVJPEG(nvjpegDecodeJpegDevice(h, decoder.get(), state.get(), &out, stream),
                "device decode");
  return Status::OK();
}

bool NvjpegDecoder::Impl::HardwareSupports(const RoiDecode& r) {
  const auto* data = reinterpret_cast<const unsigned char*>(r.bytes.data());
  int supported = -1;
  return SetRoi(params.get(), r).ok() &&
         nvjpegJpegStreamParse(handle.get(), data, r.bytes.size(), 0, 0, jpeg.get()) ==
             NVJPEG_STATUS_SUCCESS &&
         nvjpegDecodeBatchedSupportedEx(handle.get(), jpeg.get(), params.get(), &supported) ==
             NVJPEG_STATUS_SUCCESS &&
         supported == 0;
}

bool NvjpegDecoder::Impl::DecodeHardwareBatch(std::span<const RoiDecode> requests,
                                              const std::vector<size_t>& batch) {
  const size_t n = batch.size();
  while (hw_params.size() < n) {
    auto p = std::make_unique<Params>();
    if (nvjpegDecodeParamsCreate(handle.get(), p->out()) != NVJPEG_STATUS_SUCCESS) return false;
    hw_params.push_back(std::move(p));
  }
  std::vector<const unsigned char*> data(n);
  std::vector<size_t> lengths(n);
  std::vector<nvjpegImage_t> out(n);
  std::vector<nvjpegDecodeParams_t> params_list(n);
  for (size_t i = 0; i < n; ++i) {
    const RoiDecode& r = requests[batch[i]];
    data[i] = reinterpret_cast<const unsigned char*>(r.bytes.data());
    lengths[i] = r.bytes.size();
    out[i] = nvjpegImage_t{};
    out[i].channel[0] = r.dst;
    out[i].pitch[0] = r.pitch;
    params_list[i] = hw_params[i]->get();
    if (!SetRoi(params_list[i], r).ok()) return false;
  }
  return nvjpegDecodeBatchedInitialize(handle.get(), hw_state.get(), int(n), 1,
                                       NVJPEG_OUTPUT_RGBI) == NVJPEG_STATUS_SUCCESS &&
         nvjpegDecodeBatchedEx(handle.get(), hw_state.get(), data.data(), lengths.data(),
                               out.data(), params_list.data(), stream) == NVJPEG_STATUS_SUCCESS;
}

NvjpegDecoder::NvjpegDecoder(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

NvjpegDecoder::~NvjpegDecoder() {
  // nvJPEG may still be using its buffers for work on the stream.
  if (impl_ && impl_->stream != nullptr) (void)cudaStreamSynchronize(impl_->stream);
}

Result<std::unique_ptr<NvjpegDecoder>> NvjpegDecoder::Create(cudaStream_t stream,
                                                             const Options& options) {
  auto impl = std::make_unique<Impl>();
  impl->stream = stream;
  STOKER_RETURN_IF_ERROR(impl->Init(options));
  return std::unique_ptr<NvjpegDecoder>(new NvjpegDecoder(std::move(impl)));
}

bool NvjpegDecoder::hardware() const { return impl_->hardware; }

Result<JpegHeader> NvjpegDecoder::ReadHeader(std::span<const std::byte> bytes,
                                             const DecodeLimits& limits) {
  STOKER_ASSIGN_OR_RETURN(const JpegStructure s, ScanJpeg(bytes));
  if (s.sof != 0xC0 && s.sof != 0xC1 && s.sof != 0xC2) {
    return Err(
        Status::Unsupported(fmt::format("JPEG frame type {:#x} (decode on the CPU)", s.sof)));
  }
  if (s.precision != 8) {
    return Err(Status::Unsupported(fmt::format("{}-bit JPEG (decode on the CPU)", s.precision)));
  }
  if (s.components != 1 && s.components != 3) {
    return Err(
        Status::Unsupported(fmt::format("{}-component JPEG (decode on the CPU)", s.components)));
  }
  // The CPU decoder's limits, in its words.
  if (s.width > limits.max_dimension || s.height > limits.max_dimension ||
      uint64_t{s.width} * s.height > limits.max_pixels) {
    return Err(Status::ResourceExhausted(
        fmt::format("image of {}x{} pixels is over the limit", s.width, s.height)));
  }
  if (s.scans > limits.max_scans) {
    return Err(Status::ResourceExhausted(
        fmt::format("JPEG has {} scans, over the limit of {}", s.scans, limits.max_scans)));
  }
  // nvJPEG's own view of the header must agree (its parser is the one that decodes).
  int components = 0;
  nvjpegChromaSubsampling_t subsampling = NVJPEG_CSS_UNKNOWN;
  int widths[NVJPEG_MAX_COMPONENT] = {}, heights[NVJPEG_MAX_COMPONENT] = {};
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  if (const nvjpegStatus_t st = nvjpegGetImageInfo(impl_->handle.get(), data, bytes.size(),
                                                   &components, &subsampling, widths, heights);
      st != NVJPEG_STATUS_SUCCESS) {
    return Err(FromNvjpeg(st, "header"));
  }
  if (uint32_t(widths[0]) != s.width || uint32_t(heights[0]) != s.height ||
      uint32_t(components) != s.components) {
    return Err(Status::InvalidArgument("corrupt JPEG: inconsistent frame header"));
  }
  if (subsampling == NVJPEG_CSS_UNKNOWN) {
    return Err(Status::Unsupported("JPEG chroma subsampling (decode on the CPU)"));
  }
  return JpegHeader{s.width, s.height, s.components};
}

void NvjpegDecoder::Decode(std::span<const RoiDecode> requests, std::span<Status> statuses) {
  Impl& d = *impl_;
  std::vector<size_t> one_by_one, batch;
  for (size_t i = 0; i < requests.size(); ++i) {
    (d.hardware && d.HardwareSupports(requests[i]) ? batch : one_by_one).push_back(i);
  }
  if (!batch.empty()) {
    if (d.DecodeHardwareBatch(requests, batch)) {
      for (const size_t i : batch) statuses[i] = Status::OK();
    } else {
      // Which image failed is unknown: decode them one by one to find out. A failed batch
      // leaves the batched state to be reset by the next nvjpegDecodeBatchedInitialize.
      one_by_one.insert(one_by_one.end(), batch.begin(), batch.end());
    }
  }
  int parity = 0;
  for (const size_t i : one_by_one) {
    statuses[i] = d.DecodeOne(requests[i], parity);
    parity ^= 1;
  }
}

}  // namespace stoker::decode::cuda
