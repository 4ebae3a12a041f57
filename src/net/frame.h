// Frames: the 24-byte header (magic, type, flags, reserved, request id, payload length, payload
// CRC32C, header CRC32C) and its checks. Pure functions over bytes; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "net/protocol.h"
#include "stoker/status.h"

namespace stoker::net {

struct FrameHeader {
  uint8_t type = 0;  // a MessageType, or an unknown value a receiver may answer with ERROR
  uint32_t request_id = 0;
  uint32_t length = 0;
  uint32_t payload_crc = 0;
};

// A whole received frame; the payload CRC has been checked.
struct Frame {
  uint8_t type = 0;
  uint32_t request_id = 0;
  std::string payload;
  MessageType message_type() const { return static_cast<MessageType>(type); }
};

std::array<std::byte, kHeaderSize> EncodeHeader(MessageType type, uint32_t request_id,
                                                std::span<const std::byte> payload);

// Header + payload in one buffer (for small frames; DATA sends header and payload separately).
std::string EncodeFrame(MessageType type, uint32_t request_id, std::string_view payload);

// Checks magic, header CRC, flags, reserved and `length <= max_length`: Corruption for a bad
// header (nothing in it can be trusted), ResourceExhausted for a length over the limit.
Result<FrameHeader> DecodeHeader(std::span<const std::byte, kHeaderSize> bytes,
                                 uint32_t max_length);

// Corruption unless `payload` matches the header's CRC.
Status CheckPayload(const FrameHeader& header, std::string_view payload);

}  // namespace stoker::net
