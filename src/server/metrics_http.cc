// The /metrics endpoint: just enough HTTP/1.0 for Prometheus and curl. Connections are served
// side by side by one thread polling them all (a scraper that connects and says nothing holds
// only its own connection, never the next scrape), each bounded by a short deadline, and at
// most kMaxConnections at once (more are closed at once).
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include <fmt/format.h>

#include "server/server_state.h"

namespace stoker::server {
namespace {

constexpr auto kHttpTimeout = std::chrono::seconds(2);
constexpr size_t kMaxRequestBytes = 8192;
constexpr size_t kMaxConnections = 64;

// A connection whose request head is still arriving.
struct Pending {
  net::Socket socket;
  net::Deadline deadline;
  std::string head;
};

enum class Progress { kWaiting, kComplete, kFailed };

// Takes what the socket has without blocking; kComplete once the head (up to the blank line)
// is in.
Progress ReadSome(Pending& p) {
  char buf[1024];
  while (true) {
    const ssize_t n = ::recv(p.socket.fd(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Progress::kWaiting;
    if (n <= 0) return Progress::kFailed;
    p.head.append(buf, static_cast<size_t>(n));
    if (p.head.find("\r\n\r\n") != std::string::npos || p.head.find("\n\n") != std::string::npos) {
      return Progress::kComplete;
    }
    if (p.head.size() > kMaxRequestBytes) return Progress::kFailed;
  }
}

void Respond(net::Socket& socket, std::string_view status, std::string_view body,
             net::Deadline deadline) {
  const std::string response = fmt::format(
      "HTTP/1.0 {}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
      "Content-Length: {}\r\nConnection: close\r\n\r\n{}",
      status, body.size(), body);
  (void)socket.SendAll(response, deadline);
}

}  // namespace

void Server::State::MetricsLoop() {
  std::vector<Pending> pending;
  const auto answer = [&](Pending& p) {
    const std::string_view line = std::string_view(p.head).substr(0, p.head.find('\n'));
    if (line.starts_with("GET /metrics ") || line.starts_with("GET /metrics?")) {
      Respond(p.socket, "200 OK",
              metrics.RenderPrometheus() +
                  (options.extra_metrics ? options.extra_metrics() : std::string()),
              p.deadline);
    } else if (line.starts_with("GET ")) {
      Respond(p.socket, "404 Not Found", "only /metrics is served here\n", p.deadline);
    } else {
      Respond(p.socket, "405 Method Not Allowed", "only GET is supported\n", p.deadline);
    }
  };
  while (true) {
    std::vector<pollfd> fds = {{metrics_listener.fd(), POLLIN, 0}, {shutdown_pipe[0], POLLIN, 0}};
    net::Deadline soonest = net::Deadline::max();
    for (const Pending& p : pending) {
      fds.push_back({p.socket.fd(), POLLIN, 0});
      soonest = std::min(soonest, p.deadline);
    }
    int timeout_ms = -1;
    if (!pending.empty()) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(soonest - net::Clock::now());
      timeout_ms = static_cast<int>(std::max<int64_t>(0, left.count()));
    }
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) break;
    if (fds[1].revents != 0) break;
    // Requests first (their sockets are fds[2..]), then expiry, then new connections.
    const net::Clock::time_point now = net::Clock::now();
    std::vector<Pending> still;
    for (size_t i = 0; i < pending.size(); ++i) {
      Pending& p = pending[i];
      const Progress progress = fds[2 + i].revents != 0 ? ReadSome(p) : Progress::kWaiting;
      if (progress == Progress::kComplete) answer(p);
      if (progress == Progress::kWaiting && now < p.deadline) still.push_back(std::move(p));
    }
    pending = std::move(still);
    if (fds[0].revents != 0) {
      auto accepted = net::Accept(metrics_listener);
      if (accepted && pending.size() < kMaxConnections) {
        pending.push_back({std::move(*accepted), net::After(kHttpTimeout), {}});
      }
    }
  }
  metrics_listener.Close();
}

}  // namespace stoker::server
