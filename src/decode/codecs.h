// The JPEG and PNG codecs behind decode::Decoder (decoder.h), which sniffs the bytes and
// dispatches here. Internal to the decode module: callers use decoder.h; the tests use the
// pieces exposed here to check the geometry on its own.
// Thread-safety: JpegCodec is used by one thread at a time; the free functions are reentrant.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "decode/decoder.h"
#include "decode/image.h"
#include "stoker/status.h"

namespace stoker::decode::internal {

// DCT-domain scale factors M (decoding at M/8 of the size) that are worth using, from the
// measurement in jpeg_decoder.cc: libjpeg-turbo has SIMD IDCTs only for these, and the others
// (3/8, 5/8, 6/8, 7/8) decode slower than the next larger one in this set.
inline constexpr uint32_t kJpegScales[] = {1, 2, 4, 8};

// The smallest M in kJpegScales that keeps a `width` x `height` source region at least
// `min_width` x `min_height` pixels after scaling by M/8 (real-valued: width * M / 8 >=
// min_width); 8 (no scaling) when min_width or min_height is 0.
uint32_t ChooseJpegScale(uint32_t width, uint32_t height, uint32_t min_width, uint32_t min_height);

// libjpeg's decompressor, its error handling and row buffers (defined in jpeg_decoder.cc).
struct JpegSession;

// Decodes JPEGs, keeping libjpeg's state between images so a decode allocates nothing once it
// has seen an image as large (Decoder::JpegState holds one).
class JpegCodec {
 public:
  JpegCodec();
  ~JpegCodec();
  JpegCodec(const JpegCodec&) = delete;
  JpegCodec& operator=(const JpegCodec&) = delete;

  Result<ImageInfo> ReadInfo(std::span<const std::byte> bytes, const DecodeLimits& limits);
  Result<DecodedRegion> Decode(std::span<const std::byte> bytes, const DecodeRequest& request,
                               Image& out);

 private:
  std::unique_ptr<JpegSession> session_;
};

// PNG through libpng's low-level read API (png_decoder.cc; not the simplified png_image_* API,
// which applies gAMA and rounds 16-bit samples where PIL does neither), to 8-bit RGB as PIL's
// convert("RGB") gives it: always the whole image (scale 1, origin 0).
Result<ImageInfo> ReadPngInfo(std::span<const std::byte> bytes, const DecodeLimits& limits);
Result<DecodedRegion> DecodePng(std::span<const std::byte> bytes, const DecodeLimits& limits,
                                Image& out);

}  // namespace stoker::decode::internal
