// The wire protocol's parsers (docs/protocol.md) on arbitrary bytes: a stream of frames
// (DecodeHeader, CheckPayload), every payload read as each request and answer type would read
// it (PayloadReader), ERROR payloads, and the input as a stoker:// URI.
//
// Properties: no crash, leak or hang; a header that decodes has a length within the limit it was
// decoded with; a frame this target re-encodes from a decoded header and payload decodes back to
// the same fields; a URI that parses prints back to a string that parses to the same URI; a path
// ValidatePath accepts cannot escape the dataset directory.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "net/frame.h"
#include "net/payload.h"
#include "net/protocol.h"
#include "net/uri.h"

namespace {

using namespace stoker::net;

// Reads `payload` as a STAT/READ/LIST request and as each answer: the readers must stop at the
// end of the input, whatever the length fields say.
void ReadAsEveryMessage(std::string_view payload) {
  {
    PayloadReader r(payload);  // STAT / LIST request: dataset, path
    (void)r.String();
    (void)r.String();
    (void)r.ExpectEnd();
  }
  {
    PayloadReader r(payload);  // READ request: dataset, path, offset, length
    (void)r.String();
    (void)r.String();
    (void)r.U64();
    (void)r.U32();
    (void)r.ExpectEnd();
  }
  {
    PayloadReader r(payload);  // LIST_OK: count, names
    auto count = r.U32();
    for (uint32_t i = 0; count && i < *count && r.remaining() > 0; ++i) {
      if (!r.String()) break;
    }
  }
  {
    PayloadReader r(payload);  // CHALLENGE: version, nonce, proof
    (void)r.U16();
    (void)r.Raw(32);
    (void)r.Raw(32);
    (void)r.Bytes();
  }
  (void)DecodeErrorPayload(payload, "fuzz");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  if (ValidatePath(input, /*allow_root=*/true).ok()) {
    FUZZ_CHECK(!input.starts_with('/'));
    FUZZ_CHECK(input != ".." && !input.starts_with("../") && !input.ends_with("/..") &&
               input.find("/../") == std::string_view::npos);
    FUZZ_CHECK(input.find('\0') == std::string_view::npos);
  }
  if (auto uri = ParseStokerUri(input)) {
    auto again = ParseStokerUri(uri->ToString());
    FUZZ_CHECK(again.has_value());
    FUZZ_CHECK(again->ToString() == uri->ToString());
  }

  // The input as a stream of frames, decoded as a receiver would, with the handshake limit and
  // with the answer limit (so both the oversize rejection and long payloads are reached).
  for (uint32_t limit : {kMaxHandshakeFrame, kMaxAnswerFrame}) {
    size_t pos = 0;
    while (size - pos >= kHeaderSize) {
      std::span<const std::byte, kHeaderSize> bytes(reinterpret_cast<const std::byte*>(data + pos),
                                                    kHeaderSize);
      auto header = DecodeHeader(bytes, limit);
      if (!header) break;
      FUZZ_CHECK(header->length <= limit);
      pos += kHeaderSize;
      if (size - pos < header->length) break;
      const std::string_view payload = input.substr(pos, header->length);
      pos += header->length;
      if (!CheckPayload(*header, payload).ok()) continue;
      ReadAsEveryMessage(payload);
      // Round trip: a valid frame re-encodes to the same header fields.
      const std::string frame =
          EncodeFrame(static_cast<MessageType>(header->type), header->request_id, payload);
      auto back = DecodeHeader(std::span<const std::byte, kHeaderSize>(
                                   reinterpret_cast<const std::byte*>(frame.data()), kHeaderSize),
                               limit);
      FUZZ_CHECK(back.has_value());
      FUZZ_CHECK(back->type == header->type && back->request_id == header->request_id &&
                 back->length == header->length && back->payload_crc == header->payload_crc);
    }
  }
  ReadAsEveryMessage(input);
  return 0;
}
