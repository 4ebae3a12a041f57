// See feeder_client.h.
#include "feed_client/feeder_client.h"

#include <algorithm>
#include <array>
#include <utility>

#include <fmt/format.h>

#include "common/crc32c.h"
#include "net/auth.h"
#include "net/payload.h"
#include "net/protocol.h"

namespace stoker::feed {

Result<std::unique_ptr<FeederConnection>> FeederConnection::Connect(
    const std::string& host, uint16_t port, std::string_view secret, std::string_view maker_version,
    std::chrono::milliseconds timeout) {
  const net::Deadline deadline = net::After(timeout);
  STOKER_ASSIGN_OR_RETURN(net::Socket socket, net::Connect(host, port, deadline));
  STOKER_RETURN_IF_ERROR(net::ClientHandshake(socket, secret, deadline));
  std::unique_ptr<FeederConnection> connection(new FeederConnection(std::move(socket)));
  STOKER_RETURN_IF_ERROR(connection->Join(maker_version, deadline));
  return connection;
}

Status FeederConnection::Join(std::string_view maker_version, net::Deadline deadline) {
  const uint32_t id = next_id_++;
  net::PayloadWriter w;
  w.String(maker_version);
  STOKER_RETURN_IF_ERROR(net::WriteFrame(socket_, net::MessageType::kJoin, id, w.data(), deadline));
  STOKER_ASSIGN_OR_RETURN(net::Frame frame,
                          net::ReadFrame(socket_, net::kMaxRequestFrame, deadline));
  if (frame.request_id != id) {
    return Status::Corruption(fmt::format("{}: an answer to request {} where {} was asked", peer(),
                                          frame.request_id, id));
  }
  if (frame.message_type() == net::MessageType::kError) {
    return net::DecodeErrorPayload(frame.payload, peer());
  }
  net::PayloadReader r(frame.payload);
  auto theirs = r.String();
  if (frame.message_type() != net::MessageType::kJoined || !theirs || !r.ExpectEnd().ok()) {
    return Status::Corruption(fmt::format("{}: a malformed answer to JOIN", peer()));
  }
  if (*theirs != maker_version) {  // both sides check: an old feeder may not
    return Status::Unsupported(fmt::format(
        "{}: the feeder makes images with {}, this trainer with {}: run the same build on both",
        peer(), *theirs, maker_version));
  }
  return Status::OK();
}

Result<SliceAnswer> FeederConnection::Make(const SliceRequest& request,
                                           std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  STOKER_RETURN_IF_ERROR(Send(request, timeout));
  return Receive(std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now()));
}

Status FeederConnection::Send(const SliceRequest& request, std::chrono::milliseconds timeout) {
  if (broken_) return Status::Unavailable(peer() + ": the connection broke earlier");
  if (outstanding_ != 0) return Status::Internal(peer() + ": a request is outstanding already");
  const uint32_t id = next_id_++;
  // A failure leaves the request half sent: the connection is not reused.
  broken_ = true;
  STOKER_RETURN_IF_ERROR(net::WriteFrame(socket_, net::MessageType::kMake, id,
                                         EncodeSliceRequest(request), net::After(timeout)));
  broken_ = false;
  outstanding_ = id;
  outstanding_samples_ = request.samples.size();
  return Status::OK();
}

Status FeederConnection::WaitForAnswer(std::chrono::milliseconds timeout) {
  if (broken_) return Status::Unavailable(peer() + ": the connection broke earlier");
  const Status ready = socket_.WaitReadable(net::After(timeout));
  if (!ready.ok() && !ready.IsTimeout()) broken_ = true;
  return ready;  // Timeout: nothing of the answer read, still in step
}

Result<SliceAnswer> FeederConnection::Receive(std::chrono::milliseconds timeout,
                                              std::span<std::byte> pixels_into) {
  if (broken_) return Err(Status::Unavailable(peer() + ": the connection broke earlier"));
  if (outstanding_ == 0) return Err(Status::Internal(peer() + ": no request outstanding"));
  const uint32_t id = std::exchange(outstanding_, 0);
  // Any failure below leaves the connection mid-frame or unsynchronised: it is not reused.
  broken_ = true;
  const net::Deadline deadline = net::After(timeout);
  std::array<std::byte, net::kHeaderSize> raw;
  STOKER_RETURN_IF_ERROR(socket_.RecvExact(raw, deadline));
  STOKER_ASSIGN_OR_RETURN(const net::FrameHeader header,
                          net::DecodeHeader(raw, net::kMaxAnswerFrame));
  if (header.request_id != id) {
    return Err(Status::Corruption(fmt::format("{}: an answer to request {} where {} was asked",
                                              peer(), header.request_id, id)));
  }
  const auto type = static_cast<net::MessageType>(header.type);
  if (type == net::MessageType::kError) {
    std::string payload(header.length, '\0');
    STOKER_RETURN_IF_ERROR(socket_.RecvExact(std::as_writable_bytes(std::span(payload)), deadline));
    STOKER_RETURN_IF_ERROR(net::CheckPayload(header, payload));
    broken_ = false;  // a whole ERROR frame: the connection is still in step
    return Err(net::DecodeErrorPayload(payload, peer()));
  }
  if (type != net::MessageType::kMade) {
    return Err(Status::Corruption(
        fmt::format("{}: a {} frame answered MAKE", peer(), net::MessageTypeName(type))));
  }
  STOKER_ASSIGN_OR_RETURN(SliceAnswer answer, ReceiveMade(header, pixels_into, deadline));
  if (answer.samples.size() != outstanding_samples_) {
    return Err(Status::Corruption(fmt::format("{}: {} samples made of the {} asked for", peer(),
                                              answer.samples.size(), outstanding_samples_)));
  }
  broken_ = false;
  return answer;
}

// A MADE payload is read in parts, its CRC32C extended over each: the counts; then, when the
// answer has the size of `pixels_into`'s samples all made, their heads and the pixels straight
// into `pixels_into`; else the rest, as one payload.
Result<SliceAnswer> FeederConnection::ReceiveMade(const net::FrameHeader& header,
                                                  std::span<std::byte> pixels_into,
                                                  net::Deadline deadline) {
  const auto recv = [&](std::string& into, size_t from) {
    return socket_.RecvExact(std::as_writable_bytes(std::span(into).subspan(from)), deadline);
  };
  const auto check = [&](uint32_t crc) {
    return crc == header.payload_crc
               ? Status::OK()
               : Status::Corruption(fmt::format("{}: frame payload CRC mismatch ({} bytes)", peer(),
                                                header.length));
  };
  std::string head(std::min<size_t>(8, header.length), '\0');
  STOKER_RETURN_IF_ERROR(recv(head, 0));
  uint32_t crc = crc32c::Value(head);
  net::PayloadReader counts(head);
  const uint64_t count = counts.U32().value_or(0);
  const uint64_t sample_bytes = counts.U32().value_or(0);
  const uint64_t head_bytes = 8 + count * kMadeSampleHeadBytes;
  if (!pixels_into.empty() && count == outstanding_samples_ &&
      count * sample_bytes == pixels_into.size() &&
      head_bytes + pixels_into.size() == header.length) {
    head.resize(head_bytes);
    STOKER_RETURN_IF_ERROR(recv(head, 8));
    crc = crc32c::Extend(crc, head.data() + 8, head.size() - 8);
    Result<SliceAnswer> answer = DecodeSliceAnswerHead(head, peer());
    const bool all_made = answer && answer->pixels_offset == head.size() &&
                          MadeCount(*answer) == answer->samples.size();
    if (all_made) {
      STOKER_RETURN_IF_ERROR(socket_.RecvExact(pixels_into, deadline));
      STOKER_RETURN_IF_ERROR(check(crc32c::Extend(crc, pixels_into.data(), pixels_into.size())));
      answer->payload = std::move(head);
      answer->pixels_placed = true;
      return answer;
    }
  }
  const size_t have = head.size();
  head.resize(header.length);
  STOKER_RETURN_IF_ERROR(recv(head, have));
  STOKER_RETURN_IF_ERROR(check(crc32c::Extend(crc, head.data() + have, head.size() - have)));
  return DecodeSliceAnswer(std::move(head), peer());
}

}  // namespace stoker::feed
