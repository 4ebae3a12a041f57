// decode::Decoder on arbitrary bytes. Input layout: 8 request bytes, then the image file
// (the seed corpus, fuzz/corpus/decode/, is tiny JPEGs and PNGs of every layout behind such a
// prefix). The request bytes pick a region (as fractions of the size ReadImageInfo reports) and
// a minimum size, so region, DCT-scaled and full decodes all get hostile input.
//
// Properties: no crash, leak or hang, whatever the bytes; a successful decode's image covers the
// requested region where DecodedRegion says it is, at one of the allowed scales. The same
// Decoder then decodes the file whole, so reuse after success and failure is exercised too.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "decode/decoder.h"
#include "fuzz_check.h"

namespace {

using namespace stoker::decode;

// The region of a w x h image picked by four bytes (start and extent, as 1/256ths).
DecodeRequest::Rect RegionFrom(const uint8_t* p, uint32_t w, uint32_t h) {
  DecodeRequest::Rect r;
  r.x = static_cast<uint32_t>(uint64_t{w} * p[0] / 256);
  r.y = static_cast<uint32_t>(uint64_t{h} * p[1] / 256);
  r.width = static_cast<uint32_t>(1 + uint64_t{w - r.x} * p[2] / 256);
  r.height = static_cast<uint32_t>(1 + uint64_t{h - r.y} * p[3] / 256);
  return r;
}

void CheckDecoded(const DecodedRegion& decoded, const Image& image, const DecodeRequest& request) {
  FUZZ_CHECK(image.width() > 0 && image.height() > 0);
  FUZZ_CHECK(uint64_t{image.width()} * image.height() <= request.limits.max_pixels);
  const double s = decoded.scale_x;
  FUZZ_CHECK(s == decoded.scale_y);
  FUZZ_CHECK(s == 1 || s == 0.5 || s == 0.25 || s == 0.125);
  DecodeRequest::Rect r = request.region;
  if (r.width == 0 || r.height == 0) r = {0, 0, decoded.info.width, decoded.info.height};
  const uint32_t x1 = r.x + std::min(r.width, decoded.info.width - r.x);
  const uint32_t y1 = r.y + std::min(r.height, decoded.info.height - r.y);
  const Box box = decoded.ToImage({double(r.x), double(r.y), double(x1), double(y1)});
  FUZZ_CHECK(box.x0 >= 0 && box.y0 >= 0);
  FUZZ_CHECK(box.x1 <= image.width() && box.y1 <= image.height());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 8) return 0;
  const uint8_t* params = data;
  const auto bytes = std::as_bytes(std::span(data + 8, size - 8));

  DecodeRequest request;
  request.limits.max_pixels = 1 << 20;
  request.limits.max_dimension = 1 << 14;
  request.limits.max_scans = 64;
  auto info = ReadImageInfo(bytes, request.limits);
  if (info.has_value()) {
    FUZZ_CHECK(info->width > 0 && info->height > 0);
    if (params[0] & 1) request.region = RegionFrom(params + 1, info->width, info->height);
    if (params[0] & 2) {
      request.min_width = params[5] % 64;
      request.min_height = params[6] % 64;
    }
  }
  Decoder decoder;
  Image image;
  if (auto decoded = decoder.Decode(bytes, request, image)) {
    FUZZ_CHECK(info.has_value());
    CheckDecoded(*decoded, image, request);
  }
  DecodeRequest whole;
  whole.limits = request.limits;
  if (auto decoded = decoder.Decode(bytes, whole, image)) CheckDecoded(*decoded, image, whole);
  return 0;
}
