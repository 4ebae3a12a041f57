// Payload codecs: little-endian integers, u16-length strings and u32-length byte strings.
// A PayloadReader never reads past its input: every Get* fails (InvalidArgument) instead.
// Values; not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "stoker/status.h"

namespace stoker::net {

class PayloadWriter {
 public:
  PayloadWriter& U8(uint8_t v);
  PayloadWriter& U16(uint16_t v);
  PayloadWriter& U32(uint32_t v);
  PayloadWriter& U64(uint64_t v);
  PayloadWriter& Raw(std::string_view bytes);  // no length prefix
  // u16 length + bytes; InvalidArgument (remembered, see status()) above 65535 bytes.
  PayloadWriter& String(std::string_view s);
  PayloadWriter& Bytes(std::string_view s);  // u32 length + bytes

  const Status& status() const { return status_; }
  std::string& data() { return out_; }

 private:
  std::string out_;
  Status status_;
};

class PayloadReader {
 public:
  explicit PayloadReader(std::string_view in) : in_(in) {}
  Result<uint8_t> U8();
  Result<uint16_t> U16();
  Result<uint32_t> U32();
  Result<uint64_t> U64();
  Result<std::string_view> Raw(size_t n);
  Result<std::string_view> String();
  Result<std::string_view> Bytes();
  // InvalidArgument if bytes are left over: a payload must be exactly what its type says.
  Status ExpectEnd() const;
  size_t remaining() const { return in_.size(); }

 private:
  std::string_view in_;
};

// ERROR payloads: u8 StatusCode, string message (cut to 65535 bytes). The node daemon's trainer
// socket starts every reply with the same two fields (OK included).
std::string EncodeErrorPayload(const Status& status);
// Reads those two fields (OK too); nullopt if they are malformed or the code is unknown.
std::optional<Status> ReadStatus(PayloadReader& r);
// The peer's Status; Corruption naming `peer` if the payload is malformed or the code unknown.
Status DecodeErrorPayload(std::string_view payload, std::string_view peer);

}  // namespace stoker::net
