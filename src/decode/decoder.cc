// placeholder: being written (helper A replaces this file)
#include "decode/decoder.h"
namespace stoker::decode {
Result<ImageInfo> ReadImageInfo(std::span<const std::byte>, const DecodeLimits&) {
  return Err(Status::Unsupported("decode not written yet"));
}
Decoder::Decoder() : jpeg_(nullptr) {}
Decoder::~Decoder() = default;
Result<DecodedRegion> Decoder::Decode(std::span<const std::byte>, const DecodeRequest&, Image&) {
  return Err(Status::Unsupported("decode not written yet"));
}
}  // namespace stoker::decode
