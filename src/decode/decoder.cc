// decode::Decoder and ReadImageInfo: pick the codec by the leading bytes (a PNG saved as .jpg
// decodes fine) and hand over to codecs.h. Thread-safety: see decoder.h.
#include "decode/decoder.h"

#include <cstdio>
#include <string>

#include "decode/codecs.h"

namespace stoker::decode {
ImageFormat SniffImageFormat(std::span<const std::byte> bytes) {
  auto starts_with = [&](std::initializer_list<uint8_t> magic) {
    if (bytes.size() < magic.size()) return false;
    size_t i = 0;
    for (const uint8_t b : magic) {
      if (std::to_integer<uint8_t>(bytes[i++]) != b) return false;
    }
    return true;
  };
  if (starts_with({0xFF, 0xD8, 0xFF})) return ImageFormat::kJpeg;
  if (starts_with({0x89, 'P', 'N', 'G'})) return ImageFormat::kPng;
  return ImageFormat::kUnknown;
}

namespace {

// Names the first bytes, which usually tell what the file really is (GIF8, RIFF, <htm ...).
Status NotAnImage(std::span<const std::byte> bytes) {
  std::string message = "not a JPEG or PNG image";
  if (bytes.empty()) return Status::InvalidArgument(message + " (empty)");
  message += " (starts with";
  for (size_t i = 0; i < bytes.size() && i < 4; ++i) {
    char hex[4];
    std::snprintf(hex, sizeof(hex), " %02x", std::to_integer<unsigned>(bytes[i]));
    message += hex;
  }
  return Status::InvalidArgument(message + ")");
}

}  // namespace

struct Decoder::JpegState {
  internal::JpegCodec codec;
};

Result<ImageInfo> ReadImageInfo(std::span<const std::byte> bytes, const DecodeLimits& limits) {
  return Decoder().ReadInfo(bytes, limits);
}

Decoder::Decoder() : jpeg_(new JpegState) {}

Decoder::~Decoder() { delete jpeg_; }

Result<ImageInfo> Decoder::ReadInfo(std::span<const std::byte> bytes, const DecodeLimits& limits) {
  switch (SniffImageFormat(bytes)) {
    case ImageFormat::kJpeg:
      return jpeg_->codec.ReadInfo(bytes, limits);
    case ImageFormat::kPng:
      return internal::ReadPngInfo(bytes, limits);
    case ImageFormat::kUnknown:
      break;
  }
  return Err(NotAnImage(bytes));
}

Result<DecodedRegion> Decoder::Decode(std::span<const std::byte> bytes,
                                      const DecodeRequest& request, Image& out) {
  switch (SniffImageFormat(bytes)) {
    case ImageFormat::kJpeg:
      return jpeg_->codec.Decode(bytes, request, out);
    case ImageFormat::kPng:
      return internal::DecodePng(bytes, request.limits, out);
    case ImageFormat::kUnknown:
      break;
  }
  return Err(NotAnImage(bytes));
}

}  // namespace stoker::decode
