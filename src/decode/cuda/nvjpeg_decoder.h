// JPEG decoding on the GPU with nvJPEG: regions of interest of a batch of JPEGs, as RGB, into
// device memory.
//
// Two nvJPEG paths. Where the GPU has a JPEG hardware decoder (A100, H100, ...) and the handle
// can be created with NVJPEG_BACKEND_HARDWARE, the images it supports (baseline, single scan;
// asked per image with nvjpegDecodeBatchedSupportedEx) go to it in one batched call. The rest
// (progressive, or no hardware decoder) go one by one through the decoupled API with the hybrid
// backend (Huffman decode on the CPU, IDCT and colour conversion on the GPU). If a hardware
// batch fails, its images are decoded again one by one, so that an error belongs to its image.
// Chroma is upsampled with interpolation (NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION), as
// libjpeg-turbo's default "fancy" upsampling, which the CPU path uses.
//
// Before nvJPEG sees any bytes, ScanJpeg walks the markers on the host: nvJPEG does not count
// scans (the DecodeLimits::max_scans defence) and a hardware decoder may fill a truncated image
// in silently, where the CPU path reports it. Anything this path does not decode (12-bit,
// lossless, arithmetic-coded, CMYK, non-standard subsampling) is Unsupported, so that the caller
// can decode it on the CPU, which handles all of them.
//
// Thread-safety: one NvjpegDecoder per thread (nvJPEG states and buffers are per thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include <cuda_runtime_api.h>

#include "decode/cuda/jpeg_markers.h"
#include "decode/decoder.h"
#include "stoker/status.h"

namespace stoker::decode::cuda {

struct JpegHeader {
  uint32_t width = 0, height = 0, components = 0;
};

// One region to decode: `height` rows of `width` RGB pixels go to `dst` (device memory), rows
// `pitch` bytes apart.
struct RoiDecode {
  std::span<const std::byte> bytes;
  uint32_t x = 0, y = 0, width = 0, height = 0;  // in image pixels
  uint8_t* dst = nullptr;
  size_t pitch = 0;
};

// Where a region's pixels go: `pitch` bytes per row, `bytes` in all, both rounded up to whole
// 16x16 blocks (the largest iMCU). A region that ends inside a block at the image's right or
// bottom edge is still decoded block by block, and nvJPEG documents nothing about where the
// rest of such a block goes; on an H200 neither backend wrote past a tight slot
// (gpu_transform_test DecodesStayInsideTheirSlots), but a slot of whole blocks makes that a
// property of the layout rather than of one driver. Readers use only the region's pixels.
struct RegionLayout {
  size_t pitch = 0, bytes = 0;
};
RegionLayout LayoutFor(uint32_t width, uint32_t height);

class NvjpegDecoder {
 public:
  struct Options {
    bool hardware = true;  // use the hardware decoder where the GPU has one
  };
  // All work goes to `stream` (the caller's; it must outlive the decoder).
  static Result<std::unique_ptr<NvjpegDecoder>> Create(cudaStream_t stream, const Options& options);
  ~NvjpegDecoder();
  NvjpegDecoder(const NvjpegDecoder&) = delete;
  NvjpegDecoder& operator=(const NvjpegDecoder&) = delete;

  // Header checks on the host, before anything is allocated: InvalidArgument for a broken stream,
  // ResourceExhausted beyond `limits`, Unsupported for what this path leaves to the CPU.
  Result<JpegHeader> ReadHeader(std::span<const std::byte> bytes, const DecodeLimits& limits);

  // Enqueues the decode of every request on the stream; statuses[i] (statuses.size() ==
  // requests.size()) says how request i went as far as the host can tell. The caller
  // synchronizes the stream before reading the pixels, and treats a failed synchronization as
  // the failure of every request. Requests must have passed ReadHeader and lie in the image.
  void Decode(std::span<const RoiDecode> requests, std::span<Status> statuses);

  bool hardware() const;

  struct Impl;

 private:
  explicit NvjpegDecoder(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker::decode::cuda
