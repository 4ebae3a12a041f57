#include "net/frame.h"

#include <cstring>

#include "common/coding.h"
#include "common/crc32c.h"

namespace stoker::net {

std::array<std::byte, kHeaderSize> EncodeHeader(MessageType type, uint32_t request_id,
                                                std::span<const std::byte> payload) {
  std::array<std::byte, kHeaderSize> h{};
  coding::EncodeFixed<uint32_t>(&h[0], kFrameMagic);
  h[4] = static_cast<std::byte>(type);
  // bytes 5..7: flags and reserved, all zero
  coding::EncodeFixed<uint32_t>(&h[8], request_id);
  coding::EncodeFixed<uint32_t>(&h[12], static_cast<uint32_t>(payload.size()));
  coding::EncodeFixed<uint32_t>(&h[16], crc32c::Value(payload));
  coding::EncodeFixed<uint32_t>(&h[20], crc32c::Value(h.data(), 20));
  return h;
}

std::string EncodeFrame(MessageType type, uint32_t request_id, std::string_view payload) {
  const auto bytes = std::as_bytes(std::span(payload.data(), payload.size()));
  const auto header = EncodeHeader(type, request_id, bytes);
  std::string frame(reinterpret_cast<const char*>(header.data()), header.size());
  frame.append(payload);
  return frame;
}

Result<FrameHeader> DecodeHeader(std::span<const std::byte, kHeaderSize> bytes,
                                 uint32_t max_length) {
  const std::byte* p = bytes.data();
  if (coding::DecodeFixed<uint32_t>(p) != kFrameMagic) {
    return Err(Status::Corruption("bad frame magic (not a stoker peer?)"));
  }
  if (coding::DecodeFixed<uint32_t>(p + 20) != crc32c::Value(p, 20)) {
    return Err(Status::Corruption("frame header CRC mismatch"));
  }
  if (p[5] != std::byte{0} || p[6] != std::byte{0} || p[7] != std::byte{0}) {
    return Err(Status::Corruption("frame header has non-zero flags or reserved bytes"));
  }
  FrameHeader h;
  h.type = static_cast<uint8_t>(p[4]);
  h.request_id = coding::DecodeFixed<uint32_t>(p + 8);
  h.length = coding::DecodeFixed<uint32_t>(p + 12);
  h.payload_crc = coding::DecodeFixed<uint32_t>(p + 16);
  if (h.length > max_length) {
    return Err(Status::ResourceExhausted("frame of " + std::to_string(h.length) +
                                         " bytes exceeds the limit of " +
                                         std::to_string(max_length)));
  }
  return h;
}

Status CheckPayload(const FrameHeader& header, std::string_view payload) {
  if (crc32c::Value(payload) != header.payload_crc) {
    return Status::Corruption("frame payload CRC mismatch (" + std::to_string(payload.size()) +
                              " bytes)");
  }
  return Status::OK();
}

}  // namespace stoker::net
