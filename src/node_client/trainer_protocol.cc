#include "node_client/trainer_protocol.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <vector>

namespace stoker::node {

Status SendMessage(net::Socket& socket, std::string_view message, int pass_fd,
                   net::Deadline deadline) {
  iovec iov{const_cast<char*>(message.data()), message.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (pass_fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
  }
  while (true) {
    const ssize_t n = ::sendmsg(socket.fd(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n == static_cast<ssize_t>(message.size())) return Status::OK();
    if (n >= 0) return Status::IOError("node daemon socket: short send");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      STOKER_RETURN_IF_ERROR(socket.Wait(POLLOUT, deadline, -1));
      continue;
    }
    if (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN) {
      return Status::Unavailable("node daemon socket closed");
    }
    return Status::FromErrno(errno, "send to node daemon socket");
  }
}

Result<std::string> ReceiveMessage(net::Socket& socket, int* received_fd, net::Deadline deadline,
                                   int cancel_fd) {
  *received_fd = -1;
  std::string buffer(kMaxTrainerMessage, '\0');
  while (true) {
    STOKER_RETURN_IF_ERROR(socket.Wait(POLLIN, deadline, cancel_fd));
    iovec iov{buffer.data(), buffer.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(socket.fd(), &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n < 0) {
      if (errno == ECONNRESET) return Err(Status::Unavailable("node daemon socket reset"));
      return Err(Status::FromErrno(errno, "receive from node daemon socket"));
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        std::vector<int> fds(count);
        std::memcpy(fds.data(), CMSG_DATA(c), count * sizeof(int));
        for (int fd : fds) {
          if (*received_fd < 0) {
            *received_fd = fd;
          } else {
            ::close(fd);  // more descriptors than the protocol sends: never leak them
          }
        }
      }
    }
    if (n == 0) {
      if (*received_fd >= 0) ::close(*received_fd);
      *received_fd = -1;
      return Err(Status::Unavailable("node daemon socket closed"));
    }
    if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) {
      if (*received_fd >= 0) ::close(*received_fd);
      *received_fd = -1;
      return Err(Status::InvalidArgument("oversized message on the node daemon socket"));
    }
    buffer.resize(static_cast<size_t>(n));
    return buffer;
  }
}

Result<net::Socket> ConnectUnix(const std::string& path) {
  sockaddr_un addr{};
  if (path.empty() || path.size() >= sizeof addr.sun_path) {
    return Err(Status::InvalidArgument("bad node daemon socket path '" + path + "'"));
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  // A unix connect completes or fails at once (no handshake to wait for), blocking or not.
  net::Socket socket(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), path);
  if (!socket.valid()) return Err(Status::FromErrno(errno, "socket"));
  if (::connect(socket.fd(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    return Err(Status::Unavailable("no node daemon at " + path + ": " + std::strerror(errno)));
  }
  return socket;
}

}  // namespace stoker::node
