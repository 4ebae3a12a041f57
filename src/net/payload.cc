#include "net/payload.h"

#include "common/coding.h"

namespace stoker::net {

PayloadWriter& PayloadWriter::U8(uint8_t v) {
  out_.push_back(static_cast<char>(v));
  return *this;
}
PayloadWriter& PayloadWriter::U16(uint16_t v) {
  coding::PutFixed(&out_, v);
  return *this;
}
PayloadWriter& PayloadWriter::U32(uint32_t v) {
  coding::PutFixed(&out_, v);
  return *this;
}
PayloadWriter& PayloadWriter::U64(uint64_t v) {
  coding::PutFixed(&out_, v);
  return *this;
}
PayloadWriter& PayloadWriter::Raw(std::string_view bytes) {
  out_.append(bytes);
  return *this;
}
PayloadWriter& PayloadWriter::String(std::string_view s) {
  if (s.size() > UINT16_MAX) {
    if (status_.ok()) {
      status_ = Status::InvalidArgument("string of " + std::to_string(s.size()) +
                                        " bytes is too long for the protocol (max 65535)");
    }
    return U16(0);
  }
  U16(static_cast<uint16_t>(s.size()));
  return Raw(s);
}
PayloadWriter& PayloadWriter::Bytes(std::string_view s) {
  U32(static_cast<uint32_t>(s.size()));
  return Raw(s);
}

namespace {
Status Truncated(size_t want, size_t have) {
  return Status::InvalidArgument("malformed payload: wanted " + std::to_string(want) +
                                 " more bytes, " + std::to_string(have) + " left");
}
}  // namespace

Result<std::string_view> PayloadReader::Raw(size_t n) {
  if (n > in_.size()) return Err(Truncated(n, in_.size()));
  const std::string_view out = in_.substr(0, n);
  in_.remove_prefix(n);
  return out;
}

template <typename T>
static Result<T> GetFixed(PayloadReader& r) {
  STOKER_ASSIGN_OR_RETURN(const std::string_view b, r.Raw(sizeof(T)));
  return coding::DecodeFixed<T>(b.data());
}

Result<uint8_t> PayloadReader::U8() { return GetFixed<uint8_t>(*this); }
Result<uint16_t> PayloadReader::U16() { return GetFixed<uint16_t>(*this); }
Result<uint32_t> PayloadReader::U32() { return GetFixed<uint32_t>(*this); }
Result<uint64_t> PayloadReader::U64() { return GetFixed<uint64_t>(*this); }

Result<std::string_view> PayloadReader::String() {
  STOKER_ASSIGN_OR_RETURN(const uint16_t n, U16());
  return Raw(n);
}
Result<std::string_view> PayloadReader::Bytes() {
  STOKER_ASSIGN_OR_RETURN(const uint32_t n, U32());
  return Raw(n);
}

Status PayloadReader::ExpectEnd() const {
  if (!in_.empty()) {
    return Status::InvalidArgument("malformed payload: " + std::to_string(in_.size()) +
                                   " unexpected trailing bytes");
  }
  return Status::OK();
}

std::string EncodeErrorPayload(const Status& status) {
  PayloadWriter w;
  std::string_view message = status.message();
  if (message.size() > UINT16_MAX) message = message.substr(0, UINT16_MAX);
  w.U8(static_cast<uint8_t>(status.code())).String(message);
  return std::move(w.data());
}

std::optional<Status> ReadStatus(PayloadReader& r) {
  auto code = r.U8();
  auto message = r.String();
  if (!code || !message || *code > static_cast<uint8_t>(StatusCode::kCancelled)) {
    return std::nullopt;
  }
  return Status(static_cast<StatusCode>(*code), std::string(*message));
}

Status DecodeErrorPayload(std::string_view payload, std::string_view peer) {
  PayloadReader r(payload);
  std::optional<Status> st = ReadStatus(r);
  if (!st || st->ok() || !r.ExpectEnd().ok()) {
    return Status::Corruption("malformed ERROR frame from " + std::string(peer));
  }
  return *st;
}

}  // namespace stoker::net
