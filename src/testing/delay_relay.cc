// stoker_delay_relay: a userspace TCP relay that adds a fixed one-way delay to each direction,
// for tests and benchmarks on kernels without `tc netem` (see tests/netns/testbed.py).
//
//   stoker_delay_relay --listen HOST:PORT --target HOST:PORT [--delay-ms D]
//                      [--up-delay-ms D] [--down-delay-ms D] [--rate-mbit R] [--buffer BYTES]
//                      [--drop-after N] [--corrupt-at N] [--fault-direction down|up]
//                      [--fault-connections K]
//
// Every accepted connection gets its own connection to the target. "up" is client → target,
// "down" is target → client. Each direction is a thread that reads whatever arrives into a ring
// buffer, stamps it with (arrival time + delay), and writes it on once that time has passed. The
// ring holds the bytes in flight (bandwidth × delay), so a long fat link keeps its throughput:
// the relay is a pipe with latency, not a store-and-forward hop that halves it. When the ring
// is full the relay stops reading, and TCP flow control pushes back on the sender as a real
// bottleneck would. End of stream (FIN) is delayed like data.
//
// --rate-mbit caps each direction of each connection with a token bucket (tc shaping on the
// links is usually the better tool; this one is per connection and works anywhere).
//
// Fault modes (for fault-injection tests), applied to the first K connections (all if K is 0)
// in one direction (default down, the answers): --drop-after N forwards exactly N bytes and then
// closes both sides; --corrupt-at N flips every bit of the byte at stream offset N.
//
// On start it prints "listening on HOST:PORT" (the real port when PORT is 0) to stdout; one line
// per connection goes to stderr. It runs until killed.
//
// Thread-safety: each direction's state belongs to its thread; the two threads of a connection
// share only the sockets (and shutdown() on them is how one tells the other to stop).
#include <arpa/inet.h>
#include <linux/sockios.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

namespace {

using Clock = std::chrono::steady_clock;
using Nanos = std::chrono::nanoseconds;

struct Options {
  std::string listen;
  std::string target;
  double up_delay_ms = 0;
  double down_delay_ms = 0;
  double rate_mbit = 0;             // 0: no cap
  size_t buffer = size_t{8} << 20;  // ring per direction: caps bytes in flight
  std::optional<uint64_t> drop_after;
  std::optional<uint64_t> corrupt_at;
  bool fault_down = true;
  uint64_t fault_connections = 0;  // 0: every connection
};

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "stoker_delay_relay: %s\n", message.c_str());
  std::exit(2);
}

// "HOST:PORT" (HOST may be [v6]) → a resolved address.
sockaddr_storage Resolve(const std::string& spec, socklen_t* len, bool passive) {
  const size_t colon = spec.rfind(':');
  if (colon == std::string::npos) Die("want HOST:PORT, got '" + spec + "'");
  std::string host = spec.substr(0, colon);
  const std::string port = spec.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* result = nullptr;
  const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &result);
  if (rc != 0 || result == nullptr) Die("cannot resolve '" + spec + "': " + gai_strerror(rc));
  sockaddr_storage out{};
  std::memcpy(&out, result->ai_addr, result->ai_addrlen);
  *len = result->ai_addrlen;
  freeaddrinfo(result);
  return out;
}

std::string FormatAddress(const sockaddr_storage& addr) {
  char host[INET6_ADDRSTRLEN] = {};
  uint16_t port = 0;
  if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
    return "[" + std::string(host) + "]:" + std::to_string(port);
  }
  const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
  inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
  port = ntohs(a->sin_port);
  return std::string(host) + ":" + std::to_string(port);
}

void SetNoDelay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// One direction of one connection: src → ring buffer → (after the delay) → dst.
class Pipe {
 public:
  struct Fault {
    std::optional<uint64_t> drop_after;
    std::optional<uint64_t> corrupt_at;
  };

  Pipe(int src, int dst, Nanos delay, double rate_bytes_per_s, size_t capacity, Fault fault)
      : src_(src),
        dst_(dst),
        delay_(delay),
        rate_(rate_bytes_per_s),
        capacity_(capacity),
        ring_(new char[capacity]),
        fault_(fault) {}

  // Returns when the stream ended (EOF forwarded), failed, or was cut by a fault. A failure or
  // a cut shuts both sockets down completely, which wakes and ends the other direction too.
  void Run();

  uint64_t forwarded() const { return head_; }

 private:
  struct Mark {
    uint64_t end;               // stream offset just past the bytes this mark covers
    Clock::time_point release;  // when they may be written on
  };

  bool ReadSome(Clock::time_point now);   // false: the connection failed
  bool WriteSome(Clock::time_point now);  // false: the connection failed or was cut
  void Abort() {
    shutdown(src_, SHUT_RDWR);
    shutdown(dst_, SHUT_RDWR);
  }

  const int src_;
  const int dst_;
  const Nanos delay_;
  const double rate_;  // bytes per second; 0: unlimited
  const size_t capacity_;
  std::unique_ptr<char[]> ring_;
  const Fault fault_;

  uint64_t head_ = 0;  // bytes written to dst (stream offset)
  uint64_t tail_ = 0;  // bytes read from src
  std::deque<Mark> marks_;
  bool src_eof_ = false;
  Clock::time_point eof_release_{};
  // Token bucket for --rate-mbit: at most ~2 ms of burst, at least one large write.
  double tokens_ = 0;
  Clock::time_point tokens_at_{};
};

bool Pipe::ReadSome(Clock::time_point now) {
  const size_t used = tail_ - head_;
  const size_t at = tail_ % capacity_;
  const size_t room = std::min(capacity_ - used, capacity_ - at);
  const ssize_t n = recv(src_, ring_.get() + at, std::min<size_t>(room, 1 << 20), MSG_DONTWAIT);
  if (n == 0) {
    src_eof_ = true;
    eof_release_ = now + delay_;
    return true;
  }
  if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  if (fault_.corrupt_at && *fault_.corrupt_at >= tail_ &&
      *fault_.corrupt_at < tail_ + static_cast<uint64_t>(n)) {
    ring_[(*fault_.corrupt_at) % capacity_] ^= static_cast<char>(0xFF);
  }
  tail_ += static_cast<uint64_t>(n);
  marks_.push_back({tail_, now + delay_});
  return true;
}

bool Pipe::WriteSome(Clock::time_point now) {
  while (!marks_.empty() && marks_.front().end <= head_) marks_.pop_front();
  uint64_t due = head_;
  for (const Mark& m : marks_) {
    if (m.release > now) break;
    due = m.end;
  }
  if (fault_.drop_after) due = std::min(due, *fault_.drop_after);
  size_t n = std::min<uint64_t>(due - head_, capacity_ - head_ % capacity_);
  if (rate_ > 0) {
    const double burst = std::max(rate_ * 0.002, 65536.0);
    tokens_ =
        std::min(burst, tokens_ + rate_ * std::chrono::duration<double>(now - tokens_at_).count());
    tokens_at_ = now;
    n = std::min<size_t>(n, static_cast<size_t>(std::max(tokens_, 0.0)));
  }
  if (n == 0) return true;
  const ssize_t w = send(dst_, ring_.get() + head_ % capacity_, n, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (w < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
  head_ += static_cast<uint64_t>(w);
  if (rate_ > 0) tokens_ -= static_cast<double>(w);
  return true;
}

// Returns once the peer has acknowledged everything written to `fd` (or after 5 s).
void WaitUntilAcked(int fd) {
  for (int i = 0; i < 5000; ++i) {
    int unsent = 0;
    if (ioctl(fd, SIOCOUTQ, &unsent) != 0 || unsent == 0) break;
    std::this_thread::sleep_for(Nanos(1'000'000));
  }
}

void Pipe::Run() {
  tokens_at_ = Clock::now();
  for (;;) {
    const Clock::time_point now = Clock::now();
    if (fault_.drop_after && head_ >= *fault_.drop_after) {
      // Every byte before the cut has been handed to the kernel: a FIN follows them, and only
      // once the peer has acknowledged them all is the connection torn down. (Shutting the
      // reading side at once would not do: Linux answers data that arrives on a socket shut for
      // reading with a reset, which throws away what is still unacknowledged in the send queue.)
      shutdown(dst_, SHUT_WR);
      WaitUntilAcked(dst_);
      Abort();
      return;
    }
    if (!WriteSome(now)) {
      Abort();
      return;
    }
    if (src_eof_ && head_ == tail_ && now >= eof_release_) {
      shutdown(dst_, SHUT_WR);
      return;
    }
    // What to wait for: more input (if there is room), the socket to drain (if something is
    // due), or the next release time / token refill.
    pollfd fds[2];
    nfds_t nfds = 0;
    const bool want_read = !src_eof_ && tail_ - head_ < capacity_;
    if (want_read) fds[nfds++] = {src_, POLLIN, 0};
    std::optional<Clock::time_point> wake;
    const bool due_now = !marks_.empty() && marks_.front().release <= now && head_ < tail_;
    bool blocked_on_tokens = false;
    if (due_now && rate_ > 0 && tokens_ < 1) {
      blocked_on_tokens = true;
      wake = now + Nanos(static_cast<int64_t>((1 - tokens_) / rate_ * 1e9) + 1000);
    }
    if (due_now && !blocked_on_tokens) fds[nfds++] = {dst_, POLLOUT, 0};
    if (!due_now) {
      for (const Mark& m : marks_) {
        if (m.end > head_) {
          wake = m.release;
          break;
        }
      }
      if (src_eof_ && head_ == tail_) wake = eof_release_;
    }
    timespec ts{};
    timespec* timeout = nullptr;
    if (wake) {
      const int64_t ns =
          std::max<int64_t>(0, std::chrono::duration_cast<Nanos>(*wake - now).count());
      ts.tv_sec = ns / 1'000'000'000;
      ts.tv_nsec = ns % 1'000'000'000;
      timeout = &ts;
    }
    const int rc = ppoll(fds, nfds, timeout, nullptr);
    if (rc < 0 && errno != EINTR) {
      Abort();
      return;
    }
    if (want_read && rc > 0 && fds[0].revents != 0) {
      if (!ReadSome(Clock::now())) {
        Abort();
        return;
      }
    }
  }
}

// Closes a socket once the peer has acknowledged everything written to it (or after 5 s):
// closing earlier could turn into a reset that throws away bytes still in the send queue.
void CloseAfterDrain(int fd) {
  WaitUntilAcked(fd);
  close(fd);
}

void ServeConnection(int client, uint64_t id, const Options& o, const sockaddr_storage& target,
                     socklen_t target_len) {
  const int upstream = socket(target.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (upstream < 0 ||
      connect(upstream, reinterpret_cast<const sockaddr*>(&target), target_len) != 0) {
    std::fprintf(stderr, "conn %llu: connect to %s failed: %s\n",
                 static_cast<unsigned long long>(id), o.target.c_str(), std::strerror(errno));
    if (upstream >= 0) close(upstream);
    close(client);
    return;
  }
  SetNoDelay(client);
  SetNoDelay(upstream);
  const bool faulty = o.fault_connections == 0 || id <= o.fault_connections;
  const Pipe::Fault fault{faulty ? o.drop_after : std::nullopt,
                          faulty ? o.corrupt_at : std::nullopt};
  const Pipe::Fault none{};
  const double rate = o.rate_mbit * 1e6 / 8;
  auto ms = [](double v) { return Nanos(static_cast<int64_t>(v * 1e6)); };
  Pipe up(client, upstream, ms(o.up_delay_ms), rate, o.buffer, o.fault_down ? none : fault);
  Pipe down(upstream, client, ms(o.down_delay_ms), rate, o.buffer, o.fault_down ? fault : none);
  std::thread up_thread([&up] { up.Run(); });
  down.Run();
  up_thread.join();
  std::fprintf(stderr, "conn %llu closed: up %llu bytes, down %llu bytes\n",
               static_cast<unsigned long long>(id), static_cast<unsigned long long>(up.forwarded()),
               static_cast<unsigned long long>(down.forwarded()));
  CloseAfterDrain(upstream);
  CloseAfterDrain(client);
}

uint64_t ParseCount(std::string_view flag, const char* value) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(value, &end, 10);
  if (errno != 0 || end == value || *end != '\0') {
    Die(std::string(flag) + " wants a non-negative integer, got '" + value + "'");
  }
  return v;
}

double ParseNumber(std::string_view flag, const char* value) {
  char* end = nullptr;
  const double v = std::strtod(value, &end);
  if (end == value || *end != '\0' || !(v >= 0)) {
    Die(std::string(flag) + " wants a non-negative number, got '" + value + "'");
  }
  return v;
}

Options ParseArgs(int argc, char** argv) {
  Options o;
  std::optional<double> delay, up, down;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::printf(
          "usage: %s --listen HOST:PORT --target HOST:PORT [--delay-ms D] "
          "[--up-delay-ms D] [--down-delay-ms D] [--rate-mbit R] [--buffer BYTES] "
          "[--drop-after N] [--corrupt-at N] [--fault-direction down|up] "
          "[--fault-connections K]\n(see the comment at the top of "
          "src/testing/delay_relay.cc)\n",
          argv[0]);
      std::exit(0);
    }
    if (i + 1 >= argc) Die("missing value for " + std::string(flag));
    const char* value = argv[++i];
    if (flag == "--listen") {
      o.listen = value;
    } else if (flag == "--target") {
      o.target = value;
    } else if (flag == "--delay-ms") {
      delay = ParseNumber(flag, value);
    } else if (flag == "--up-delay-ms") {
      up = ParseNumber(flag, value);
    } else if (flag == "--down-delay-ms") {
      down = ParseNumber(flag, value);
    } else if (flag == "--rate-mbit") {
      o.rate_mbit = ParseNumber(flag, value);
    } else if (flag == "--buffer") {
      o.buffer = ParseCount(flag, value);
      if (o.buffer < 4096) Die("--buffer must be at least 4096");
    } else if (flag == "--drop-after") {
      o.drop_after = ParseCount(flag, value);
    } else if (flag == "--corrupt-at") {
      o.corrupt_at = ParseCount(flag, value);
    } else if (flag == "--fault-direction") {
      if (std::string_view(value) != "down" && std::string_view(value) != "up") {
        Die("--fault-direction wants down or up");
      }
      o.fault_down = std::string_view(value) == "down";
    } else if (flag == "--fault-connections") {
      o.fault_connections = ParseCount(flag, value);
    } else {
      Die("unknown flag " + std::string(flag) + " (try --help)");
    }
  }
  if (o.listen.empty() || o.target.empty()) Die("--listen and --target are required");
  o.up_delay_ms = up.value_or(delay.value_or(0));
  o.down_delay_ms = down.value_or(delay.value_or(0));
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = ParseArgs(argc, argv);
  signal(SIGPIPE, SIG_IGN);
  socklen_t listen_len = 0;
  socklen_t target_len = 0;
  const sockaddr_storage listen_addr = Resolve(o.listen, &listen_len, true);
  const sockaddr_storage target = Resolve(o.target, &target_len, false);

  const int listener = socket(listen_addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  if (listener < 0) Die(std::string("socket: ") + std::strerror(errno));
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(listener, reinterpret_cast<const sockaddr*>(&listen_addr), listen_len) != 0) {
    Die("bind " + o.listen + ": " + std::strerror(errno));
  }
  if (listen(listener, 128) != 0) Die(std::string("listen: ") + std::strerror(errno));
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof bound;
  getsockname(listener, reinterpret_cast<sockaddr*>(&bound), &bound_len);
  std::printf("listening on %s\n", FormatAddress(bound).c_str());
  std::fflush(stdout);

  uint64_t next_id = 0;
  for (;;) {
    const int client = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE) {
        if (errno == EMFILE || errno == ENFILE) std::this_thread::sleep_for(Nanos(10'000'000));
        continue;
      }
      Die(std::string("accept: ") + std::strerror(errno));
    }
    const uint64_t id = ++next_id;
    std::thread([client, id, &o, &target, target_len] {
      ServeConnection(client, id, o, target, target_len);
    }).detach();
  }
}
