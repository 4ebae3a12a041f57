// Image decoding: JPEG (libjpeg-turbo) and PNG (libpng), chosen by the bytes, not the name.
//
// A decode can be asked for only part of the image and at reduced size: JPEG decodes then skip
// the work the crop throws away, with DCT-domain scaling (libjpeg-turbo's scale_num/8) when the
// region will be downscaled anyway, and region-of-interest decoding (jpeg_crop_scanline for
// columns, jpeg_skip_scanlines above, stopping after the last needed row). PNG has no such
// shortcuts: it is decoded whole and the caller crops.
//
// Errors never abort the process (libjpeg's default error handler calls exit()): every libjpeg
// error and every corrupt-data warning (truncated file, bad Huffman code — where libjpeg would
// silently fill gray) becomes a Status. Limits are checked on the header, before any pixel
// buffer is allocated. Thread-safety: the functions are reentrant; use one Decoder per thread.
#pragma once

#include <cstdint>
#include <span>

#include "decode/image.h"
#include "stoker/status.h"

namespace stoker::decode {

struct DecodeLimits {
  uint64_t max_pixels = 1ull << 26;   // width * height from the header (64 Mpixel)
  uint32_t max_dimension = 1u << 16;  // either side
  uint32_t max_scans = 256;           // progressive JPEG scans (a DoS vector otherwise)
};

struct ImageInfo {
  ImageFormat format = ImageFormat::kUnknown;
  uint32_t width = 0, height = 0;  // as stored (EXIF orientation is not applied, as PIL doesn't)
  uint32_t components = 0;         // in the file: 1 gray, 3 color, 4 CMYK/YCCK or RGBA
  bool progressive = false;
};

// The format the first bytes say (kUnknown: neither JPEG nor PNG).
ImageFormat SniffImageFormat(std::span<const std::byte> bytes);

// Reads only the header. InvalidArgument for bytes that are neither JPEG nor PNG ("not an
// image"), also for a broken header (damaged input: Corruption is for storage, which CRCs
// check), ResourceExhausted beyond `limits`.
Result<ImageInfo> ReadImageInfo(std::span<const std::byte> bytes, const DecodeLimits& limits = {});

struct DecodeRequest {
  // The part of the image the caller needs, in source pixels (clamped to the image); empty
  // (width or height 0): the whole image.
  struct Rect {
    uint32_t x = 0, y = 0, width = 0, height = 0;
  } region;
  // After DCT scaling the region must still be at least this many pixels wide and high (so the
  // caller downscales, never upscales, what it gets). 0 = no DCT scaling.
  uint32_t min_width = 0, min_height = 0;
  DecodeLimits limits;
};

// What a decode produced: `image` holds pixels covering at least the requested region (it may be
// wider or taller: crops snap to iMCU boundaries), at `scale` decoded pixels per source pixel
// (1, or libjpeg's M/8 for the chosen M). Source coordinates map to image coordinates as
//   image_x = source_x * scale_x - origin_x,  image_y = source_y * scale_y - origin_y.
struct DecodedRegion {
  double scale_x = 1, scale_y = 1;
  double origin_x = 0, origin_y = 0;
  ImageInfo info;
  // `box` (in source pixels) in the decoded image's coordinates.
  Box ToImage(const Box& source) const {
    return {source.x0 * scale_x - origin_x, source.y0 * scale_y - origin_y,
            source.x1 * scale_x - origin_x, source.y1 * scale_y - origin_y};
  }
};

// Reuses its buffers and libjpeg state between images; one per thread.
class Decoder {
 public:
  Decoder();
  ~Decoder();
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  // ReadImageInfo with this decoder's reusable libjpeg state: the per-sample path reads the
  // header (to choose the crop) and then decodes, so it should not set libjpeg up twice.
  Result<ImageInfo> ReadInfo(std::span<const std::byte> bytes, const DecodeLimits& limits = {});

  // Decodes `bytes` (JPEG or PNG, sniffed) into `out` as RGB. On error `out` is unspecified and
  // must not be used; the Status says why (InvalidArgument for damaged data and non-images,
  // ResourceExhausted for limits, Unsupported for e.g. 16-bit-per-sample JPEG).
  Result<DecodedRegion> Decode(std::span<const std::byte> bytes, const DecodeRequest& request,
                               Image& out);

 private:
  struct JpegState;
  JpegState* jpeg_;  // owned; libjpeg's struct lives here between calls
};

}  // namespace stoker::decode
