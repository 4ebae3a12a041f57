// The /metrics endpoint: just enough HTTP/1.0 for Prometheus and curl. One request at a time on
// its own thread, each bounded by a short deadline, so a slow scraper delays only other scrapes.
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

#include <fmt/format.h>

#include "server/server_state.h"

namespace stoker::server {
namespace {

constexpr auto kHttpTimeout = std::chrono::seconds(2);
constexpr size_t kMaxRequestBytes = 8192;

// Reads the request head (up to the blank line) before the deadline; empty on failure.
std::string ReadRequestHead(net::Socket& socket, net::Deadline deadline) {
  std::string head;
  char buf[1024];
  while (head.find("\r\n\r\n") == std::string::npos && head.find("\n\n") == std::string::npos) {
    if (head.size() > kMaxRequestBytes || !socket.WaitReadable(deadline).ok()) return {};
    const ssize_t n = ::recv(socket.fd(), buf, sizeof(buf), 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) return {};
    head.append(buf, static_cast<size_t>(n));
  }
  return head;
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
  while (true) {
    pollfd fds[2] = {{metrics_listener.fd(), POLLIN, 0}, {shutdown_pipe[0], POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) break;
    if (fds[1].revents != 0) break;
    if (fds[0].revents == 0) continue;
    auto accepted = net::Accept(metrics_listener);
    if (!accepted) continue;
    const net::Deadline deadline = net::After(kHttpTimeout);
    const std::string head = ReadRequestHead(*accepted, deadline);
    if (head.empty()) continue;
    const std::string_view line = std::string_view(head).substr(0, head.find('\n'));
    if (line.starts_with("GET /metrics ") || line.starts_with("GET /metrics?")) {
      Respond(*accepted, "200 OK",
              metrics.RenderPrometheus() +
                  (options.extra_metrics ? options.extra_metrics() : std::string()),
              deadline);
    } else if (line.starts_with("GET ")) {
      Respond(*accepted, "404 Not Found", "only /metrics is served here\n", deadline);
    } else {
      Respond(*accepted, "405 Method Not Allowed", "only GET is supported\n", deadline);
    }
  }
  metrics_listener.Close();
}

}  // namespace stoker::server
