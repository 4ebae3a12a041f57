// TCP sockets with deadlines: every wait is a poll() bounded by a steady-clock deadline, sends
// never raise SIGPIPE (MSG_NOSIGNAL), and frames are read with both CRC checks. Sockets are
// non-blocking underneath. A Socket is used by one thread at a time; ShutdownBoth() may be called
// from another thread to wake it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "net/frame.h"
#include "stoker/status.h"

namespace stoker::net {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

inline Deadline After(std::chrono::milliseconds d) { return Clock::now() + d; }

class Socket {
 public:
  Socket() = default;
  Socket(int fd, std::string peer);
  ~Socket();
  Socket(Socket&& other) noexcept;
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // "host:port" of the other end, for error messages.
  const std::string& peer() const { return peer_; }
  void Close();
  // Wakes any thread blocked on this socket (its next poll sees EOF) without closing the fd.
  void ShutdownBoth();

  // Unavailable if the peer closed or reset the connection, Timeout at the deadline.
  Status SendAll(std::span<const std::byte> data, Deadline deadline);
  Status SendAll(std::string_view data, Deadline deadline);
  Status RecvExact(std::span<std::byte> dst, Deadline deadline);
  // OK once a byte can be read (or EOF is pending); Timeout at the deadline; Cancelled if
  // `cancel_fd` (>= 0) becomes readable first.
  Status WaitReadable(Deadline deadline, int cancel_fd = -1);
  // The same for any poll() events (POLLOUT: a connect finished or send room).
  Status Wait(short events, Deadline deadline, int cancel_fd);

 private:
  int fd_ = -1;
  std::string peer_;
};

// Resolves `host` and connects, all before `deadline`; TCP_NODELAY is set.
Result<Socket> Connect(const std::string& host, uint16_t port, Deadline deadline);

// Binds and listens on host:port (port 0: an ephemeral port, see BoundPort).
Result<Socket> Listen(const std::string& host, uint16_t port, int backlog = 512);
Result<uint16_t> BoundPort(const Socket& listener);
// One pending connection (non-blocking accept); Unavailable if there is none right now.
Result<Socket> Accept(const Socket& listener);

// Reads one frame whose payload is at most `max_length` bytes: the whole frame must arrive
// before `deadline`. Checks the header CRC before trusting the length, and the payload CRC.
// `before_payload` (optional) sees the checked header before the payload is read: an error
// from it ends the read (a receiver's limits per type, or memory to reserve first).
Result<Frame> ReadFrame(Socket& socket, uint32_t max_length, Deadline deadline,
                        const std::function<Status(const FrameHeader&)>& before_payload = {});
Status WriteFrame(Socket& socket, MessageType type, uint32_t request_id, std::string_view payload,
                  Deadline deadline);

}  // namespace stoker::net
