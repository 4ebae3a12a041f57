// A trainer's connection to one feeder (`stoker feed`): the job's handshake, then MAKE requests
// answered by MADE (feed_client/slice.h; docs/protocol.md, "Feeders"). Requests are answered in
// order; a failed connection is not reused (a new one is made).
//
// Thread-safety: one thread at a time per connection (Cancel from any).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "feed_client/slice.h"
#include "net/frame.h"
#include "net/socket.h"
#include "stoker/status.h"

namespace stoker::feed {

class FeederConnection {
 public:
  // Connects, authenticates and joins before `timeout`: PermissionDenied for a wrong secret
  // (or a feeder of another job), Unsupported for a feeder of another protocol version or one
  // whose images are made by another build (`maker_version`, decode::MakerVersion(): both
  // named in the message).
  static Result<std::unique_ptr<FeederConnection>> Connect(const std::string& host, uint16_t port,
                                                           std::string_view secret,
                                                           std::string_view maker_version,
                                                           std::chrono::milliseconds timeout);

  // The slice made by the feeder, whole, before `timeout`; the feeder's error (NotFound for a
  // dataset or version it cannot open, ResourceExhausted when it is full, ...), or this
  // connection's (Unavailable, Timeout, Corruption for a frame or answer that fails its checks:
  // the connection is then broken()). Send + Receive.
  Result<SliceAnswer> Make(const SliceRequest& request, std::chrono::milliseconds timeout);

  // The same in steps, so that a trainer can hedge a slow slice (make it elsewhere too) and
  // still take this feeder's answer if it comes first: Send the request; WaitForAnswer OK once
  // its first byte is in, Timeout if not yet (the connection stays in step: call again, or
  // Receive); Receive the whole answer. One request outstanding at a time.
  //
  // `pixels_into`: where the pixels go when every sample was made and they are exactly its
  // size (the trainer's batch rows): read from the socket straight there, never copied, and
  // the answer is pixels_placed. Otherwise (a sample not made, another size) the answer holds
  // them as usual. A failed Receive may have written anything there.
  Status Send(const SliceRequest& request, std::chrono::milliseconds timeout);
  Status WaitForAnswer(std::chrono::milliseconds timeout);
  Result<SliceAnswer> Receive(std::chrono::milliseconds timeout,
                              std::span<std::byte> pixels_into = {});

  // Wakes a Make() blocked in another thread: it fails, and the connection is broken().
  // Thread-safe.
  void Cancel() { socket_.ShutdownBoth(); }

  bool broken() const { return broken_; }
  // Ready for the next request: not broken, and no answer still owed (a caller that stops
  // waiting for one must not reuse the connection).
  bool in_step() const { return !broken_ && outstanding_ == 0; }
  const std::string& peer() const { return socket_.peer(); }

 private:
  explicit FeederConnection(net::Socket socket) : socket_(std::move(socket)) {}
  Status Join(std::string_view maker_version, net::Deadline deadline);
  Result<SliceAnswer> ReceiveMade(const net::FrameHeader& header, std::span<std::byte> pixels_into,
                                  net::Deadline deadline);
  net::Socket socket_;
  uint32_t next_id_ = 1;
  uint32_t outstanding_ = 0;  // the id of the request sent and not yet answered; 0: none
  size_t outstanding_samples_ = 0;
  bool broken_ = false;
};

}  // namespace stoker::feed
