// See feeder_client.h.
#include "feed_client/feeder_client.h"

#include <utility>

#include <fmt/format.h>

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

Result<SliceAnswer> FeederConnection::Receive(std::chrono::milliseconds timeout) {
  if (broken_) return Err(Status::Unavailable(peer() + ": the connection broke earlier"));
  if (outstanding_ == 0) return Err(Status::Internal(peer() + ": no request outstanding"));
  const uint32_t id = std::exchange(outstanding_, 0);
  // Any failure below leaves the connection mid-frame or unsynchronised: it is not reused.
  broken_ = true;
  STOKER_ASSIGN_OR_RETURN(net::Frame frame,
                          net::ReadFrame(socket_, net::kMaxAnswerFrame, net::After(timeout)));
  if (frame.request_id != id) {
    return Err(Status::Corruption(fmt::format("{}: an answer to request {} where {} was asked",
                                              peer(), frame.request_id, id)));
  }
  if (frame.message_type() == net::MessageType::kError) {
    broken_ = false;  // a whole ERROR frame: the connection is still in step
    return Err(net::DecodeErrorPayload(frame.payload, peer()));
  }
  if (frame.message_type() != net::MessageType::kMade) {
    return Err(Status::Corruption(fmt::format("{}: a {} frame answered MAKE", peer(),
                                              net::MessageTypeName(frame.message_type()))));
  }
  STOKER_ASSIGN_OR_RETURN(SliceAnswer answer, DecodeSliceAnswer(std::move(frame.payload), peer()));
  if (answer.samples.size() != outstanding_samples_) {
    return Err(Status::Corruption(fmt::format("{}: {} samples made of the {} asked for", peer(),
                                              answer.samples.size(), outstanding_samples_)));
  }
  broken_ = false;
  return answer;
}

}  // namespace stoker::feed
