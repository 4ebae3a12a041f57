#include "net/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

namespace stoker::net {
namespace {

Status SetNonBlocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return Status::FromErrno(errno, "fcntl(O_NONBLOCK)");
  }
  return Status::OK();
}

void SetNoDelay(int fd) {
  const int one = 1;
  // Requests and answers are small and latency-bound; Nagle would delay them. Best effort.
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

std::string AddressString(const sockaddr* sa) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    port = ntohs(in->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    port = ntohs(in6->sin6_port);
    return "[" + std::string(host) + "]:" + std::to_string(port);
  }
  return "?";
}

int MillisUntil(Deadline deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 60'000));
}

bool IsConnectionLost(int err) {
  return err == ECONNRESET || err == EPIPE || err == ENOTCONN || err == ECONNABORTED ||
         err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH;
}

}  // namespace

Socket::Socket(int fd, std::string peer) : fd_(fd), peer_(std::move(peer)) {}
Socket::~Socket() { Close(); }
Socket::Socket(Socket&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), peer_(std::move(other.peer_)) {}
Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = std::exchange(other.fd_, -1);
    peer_ = std::move(other.peer_);
  }
  return *this;
}

void Socket::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Socket::ShutdownBoth() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

Status Socket::Wait(short events, Deadline deadline, int cancel_fd) {
  while (true) {
    pollfd fds[2] = {{fd_, events, 0}, {cancel_fd, POLLIN, 0}};
    const int timeout = MillisUntil(deadline);
    const int n = ::poll(fds, cancel_fd >= 0 ? 2 : 1, timeout);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "poll on connection to " + peer_);
    }
    if (cancel_fd >= 0 && fds[1].revents != 0) return Status::Cancelled("shutting down");
    if (fds[0].revents != 0) return Status::OK();  // ready, or an error the next call reports
    if (Clock::now() >= deadline) {
      return Status::Timeout("timed out waiting for " + peer_);
    }
  }
}

Status Socket::WaitReadable(Deadline deadline, int cancel_fd) {
  return Wait(POLLIN, deadline, cancel_fd);
}

Status Socket::SendAll(std::span<const std::byte> data, Deadline deadline) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::send(fd_, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n >= 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      STOKER_RETURN_IF_ERROR(Wait(POLLOUT, deadline, -1));
      continue;
    }
    if (IsConnectionLost(errno)) {
      return Status::Unavailable("connection to " + peer_ +
                                 " lost while sending: " + std::strerror(errno));
    }
    return Status::FromErrno(errno, "send to " + peer_);
  }
  return Status::OK();
}

Status Socket::SendAll(std::string_view data, Deadline deadline) {
  return SendAll(std::as_bytes(std::span(data.data(), data.size())), deadline);
}

Status Socket::RecvExact(std::span<std::byte> dst, Deadline deadline) {
  size_t done = 0;
  while (done < dst.size()) {
    const ssize_t n = ::recv(fd_, dst.data() + done, dst.size() - done, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return Status::Unavailable("connection closed by " + peer_);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      STOKER_RETURN_IF_ERROR(Wait(POLLIN, deadline, -1));
      continue;
    }
    if (IsConnectionLost(errno)) {
      return Status::Unavailable("connection to " + peer_ + " lost: " + std::strerror(errno));
    }
    return Status::FromErrno(errno, "recv from " + peer_);
  }
  return Status::OK();
}

namespace {

// getaddrinfo has no timeout and cannot be cancelled, so a name lookup runs on a helper thread:
// a caller whose deadline passes gets Timeout, and the lookup finishes (and frees) on its own.
// IP literals are resolved in place, without a thread.
Result<std::shared_ptr<addrinfo>> Resolve(const std::string& host, uint16_t port,
                                          const std::string& name, Deadline deadline) {
  struct Lookup {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    int rc = 0;
    addrinfo* result = nullptr;
    ~Lookup() {
      if (result != nullptr) ::freeaddrinfo(result);
    }
  };
  auto lookup = std::make_shared<Lookup>();
  const std::string service = std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  lookup->rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &lookup->result);
  if (lookup->rc == EAI_NONAME) {
    hints.ai_flags = AI_NUMERICSERV;
    std::thread([lookup, host, service, hints] {
      addrinfo* result = nullptr;
      const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &result);
      std::lock_guard lock(lookup->mu);
      lookup->rc = rc;
      lookup->result = result;
      lookup->done = true;
      lookup->cv.notify_all();
    }).detach();
    std::unique_lock lock(lookup->mu);
    if (!lookup->cv.wait_until(lock, deadline, [&] { return lookup->done; })) {
      return Err(Status::Timeout("timed out resolving " + name));
    }
  }
  if (lookup->rc != 0) {
    return Err(Status::Unavailable("cannot resolve " + name + ": " + ::gai_strerror(lookup->rc)));
  }
  return std::shared_ptr<addrinfo>(lookup, lookup->result);
}

}  // namespace

Result<Socket> Connect(const std::string& host, uint16_t port, Deadline deadline) {
  const std::string name =
      (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
  STOKER_ASSIGN_OR_RETURN(const std::shared_ptr<addrinfo> res, Resolve(host, port, name, deadline));
  Status last(StatusCode::kUnavailable, "no address for " + name);
  for (addrinfo* ai = res.get(); ai != nullptr; ai = ai->ai_next) {
    Socket s(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol), name);
    if (!s.valid()) {
      last = Status::FromErrno(errno, "socket for " + name);
      continue;
    }
    if (Status st = SetNonBlocking(s.fd()); !st.ok()) {
      last = st;
      continue;
    }
    if (::connect(s.fd(), ai->ai_addr, ai->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        last = Status::Unavailable("connect to " + name + ": " + std::strerror(errno));
        continue;
      }
      if (Status st = s.Wait(POLLOUT, deadline, -1); !st.ok()) {
        last = st.IsTimeout() ? Status::Timeout("timed out connecting to " + name) : st;
        continue;
      }
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) {
        last = Status::Unavailable("connect to " + name + ": " + std::strerror(err));
        continue;
      }
    }
    SetNoDelay(s.fd());
    return s;
  }
  return Err(last);
}

Result<Socket> Listen(const std::string& host, uint16_t port, int backlog) {
  const std::string name = host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc =
          ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
      rc != 0) {
    return Err(Status::InvalidArgument("cannot resolve listen address " + name + ": " +
                                       ::gai_strerror(rc)));
  }
  Status last = Status::InvalidArgument("no address to listen on for " + name);
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    Socket s(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol), name);
    if (!s.valid()) {
      last = Status::FromErrno(errno, "socket for " + name);
      continue;
    }
    const int one = 1;
    // A restarted server must not wait out TIME_WAIT of its previous connections.
    ::setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(s.fd(), ai->ai_addr, ai->ai_addrlen) != 0) {
      const int err = errno;
      last = err == EADDRINUSE
                 ? Status::AlreadyExists("cannot listen on " + name +
                                         ": address already in use (another server running?)")
                 : Status::FromErrno(err, "bind " + name);
      continue;
    }
    if (::listen(s.fd(), backlog) != 0) {
      last = Status::FromErrno(errno, "listen on " + name);
      continue;
    }
    if (Status st = SetNonBlocking(s.fd()); !st.ok()) {
      last = st;
      continue;
    }
    ::freeaddrinfo(res);
    return s;
  }
  ::freeaddrinfo(res);
  return Err(last);
}

Result<uint16_t> BoundPort(const Socket& listener) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(listener.fd(), reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return Err(Status::FromErrno(errno, "getsockname"));
  }
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return Err(Status::Internal("listener has no IP address"));
}

Result<Socket> Accept(const Socket& listener) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  const int fd = ::accept4(listener.fd(), reinterpret_cast<sockaddr*>(&ss), &len,
                           SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) {
      return Err(Status::Unavailable("no pending connection"));
    }
    return Err(Status::FromErrno(errno, "accept"));
  }
  SetNoDelay(fd);
  return Socket(fd, AddressString(reinterpret_cast<sockaddr*>(&ss)));
}

Result<Frame> ReadFrame(Socket& socket, uint32_t max_length, Deadline deadline,
                        const std::function<Status(const FrameHeader&)>& before_payload) {
  std::array<std::byte, kHeaderSize> raw;
  STOKER_RETURN_IF_ERROR(socket.RecvExact(raw, deadline));
  STOKER_ASSIGN_OR_RETURN(const FrameHeader h, DecodeHeader(raw, max_length));
  if (before_payload) STOKER_RETURN_IF_ERROR(before_payload(h));
  Frame frame;
  frame.type = h.type;
  frame.request_id = h.request_id;
  frame.payload.resize(h.length);
  STOKER_RETURN_IF_ERROR(socket.RecvExact(
      std::as_writable_bytes(std::span(frame.payload.data(), frame.payload.size())), deadline));
  STOKER_RETURN_IF_ERROR(CheckPayload(h, frame.payload));
  return frame;
}

Status WriteFrame(Socket& socket, MessageType type, uint32_t request_id, std::string_view payload,
                  Deadline deadline) {
  return socket.SendAll(EncodeFrame(type, request_id, payload), deadline);
}

}  // namespace stoker::net
