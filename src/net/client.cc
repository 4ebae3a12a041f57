#include <fmt/format.h>

#include "net/client.h"

#include <algorithm>
#include <optional>
#include <set>
#include <thread>

#include "common/crc32c.h"
#include "common/hash.h"
#include "net/auth.h"
#include "net/payload.h"
#include "net/protocol.h"

namespace stoker::net {

namespace {

struct Connection {
  Socket socket;
  uint32_t next_id = 1;
};

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

}  // namespace

struct Client::Pool {
  ServerAddress address;
  std::string name;  // "host:port"
  std::mutex mu;
  std::vector<std::unique_ptr<Connection>> idle;  // guarded by mu
  std::atomic<int64_t> down_until_ns{0};

  void DropIdle() {
    std::lock_guard lock(mu);
    idle.clear();
  }
};

// The outcome of one request. `connection_failure`: the transport failed (the server may be
// fine on another connection, or down); otherwise `status` is the server's own answer.
struct Client::Answer {
  Status status;
  Frame frame;
  bool connection_failure = false;
  bool data_filled = false;  // a DATA answer went straight into data_into
  // The request went out on a try whose answer was lost, so the server may have carried it out
  // before the try that answered: a non-idempotent request's answer may describe its own echo.
  bool resent = false;
  int server = -1;
};

Status ClientOptions::Validate() const {
  if (connect_timeout.count() <= 0 || request_timeout.count() <= 0) {
    return Status::InvalidArgument("client timeouts must be positive");
  }
  return retry.Validate();
}

Client::Client(StokerUri uri, std::string secret, ClientOptions options)
    : uri_(std::move(uri)), secret_(std::move(secret)), options_(options) {
  for (const ServerAddress& a : uri_.servers) {
    auto pool = std::make_unique<Pool>();
    pool->address = a;
    pool->name = a.ToString();
    pools_.push_back(std::move(pool));
  }
}

Client::~Client() = default;

Result<std::shared_ptr<Client>> Client::Create(StokerUri uri, std::string secret,
                                               ClientOptions options) {
  STOKER_RETURN_IF_ERROR(options.Validate());
  STOKER_RETURN_IF_ERROR(CheckSecret(secret, "the client configuration"));
  if (uri.servers.empty()) return Err(Status::InvalidArgument("stoker:// URI without servers"));
  return std::shared_ptr<Client>(new Client(std::move(uri), std::move(secret), options));
}

std::string Client::Describe(std::string_view path, int server) const {
  std::string out;
  if (server < 0) {
    out = uri_.ToString();
  } else {
    out =
        std::string(kStokerScheme) + pools_[static_cast<size_t>(server)]->name + "/" + uri_.dataset;
  }
  if (!path.empty()) out += "/" + std::string(path);
  return out;
}

std::vector<size_t> Client::ServerOrder(std::string_view path) const {
  const size_t n = pools_.size();
  const size_t first = n == 1 ? 0 : static_cast<size_t>(Hash64(path) % n);
  std::vector<size_t> order;
  order.reserve(n);
  for (size_t i = 0; i < n; ++i) order.push_back((first + i) % n);
  // Servers that recently failed every try go last: still tried, but not before healthy ones.
  const int64_t now = NowNs();
  std::stable_partition(order.begin(), order.end(),
                        [&](size_t s) { return pools_[s]->down_until_ns.load() <= now; });
  return order;
}

namespace {

// The request's deadline, pushed back by `silence` each time bytes arrive.
struct ProgressDeadline {
  std::chrono::milliseconds silence;
  Deadline at;
  void Progressed() { at = After(silence); }
};

// RecvExact in pieces, each piece that arrives pushing the deadline back.
Status RecvWithProgress(Socket& socket, std::span<std::byte> dst, ProgressDeadline& deadline) {
  constexpr size_t kPiece = 1 << 20;
  for (size_t done = 0; done < dst.size();) {
    const size_t n = std::min(kPiece, dst.size() - done);
    STOKER_RETURN_IF_ERROR(socket.RecvExact(dst.subspan(done, n), deadline.at));
    deadline.Progressed();
    done += n;
  }
  return Status::OK();
}

// Reads the answer to request `id`. A DATA answer of exactly data_into.size() bytes is received
// straight into data_into (no copy); everything else into frame.payload.
Status ReadAnswer(Connection& c, uint32_t id, std::span<std::byte> data_into,
                  ProgressDeadline& deadline, Frame* frame, bool* data_filled) {
  *data_filled = false;
  std::array<std::byte, kHeaderSize> raw;
  STOKER_RETURN_IF_ERROR(RecvWithProgress(c.socket, raw, deadline));
  STOKER_ASSIGN_OR_RETURN(const FrameHeader h, DecodeHeader(raw, kMaxAnswerFrame));
  if (h.request_id != id) {
    return Status::Corruption("answer for request " + std::to_string(h.request_id) +
                              " while waiting for request " + std::to_string(id));
  }
  frame->type = h.type;
  frame->request_id = h.request_id;
  if (frame->message_type() == MessageType::kData && h.length == data_into.size()) {
    STOKER_RETURN_IF_ERROR(RecvWithProgress(c.socket, data_into, deadline));
    if (crc32c::Value(data_into) != h.payload_crc) {
      return Status::Corruption("DATA payload CRC mismatch (" + std::to_string(h.length) +
                                " bytes)");
    }
    *data_filled = true;
  } else {
    frame->payload.resize(h.length);
    STOKER_RETURN_IF_ERROR(RecvWithProgress(
        c.socket, std::as_writable_bytes(std::span(frame->payload.data(), frame->payload.size())),
        deadline));
    STOKER_RETURN_IF_ERROR(CheckPayload(h, frame->payload));
  }
  return Status::OK();
}

}  // namespace

Client::Answer Client::CallServer(size_t server, bool last_resort, MessageType type,
                                  const std::string& payload, std::span<std::byte> data_into) {
  Pool& pool = *pools_[server];
  Answer out;
  out.server = static_cast<int>(server);
  Status last;
  ProgressDeadline deadline{options_.request_timeout, After(options_.request_timeout)};
  // Failed exchanges get a few tries within the request's deadline; a server that cannot be
  // reached, when no other is left, gets tries until the reconnect deadline (a restart).
  Retry retry(options_.retry);
  Retry reconnects(options_.reconnect_retry);
  const bool patient = last_resort && options_.reconnect_timeout.count() > 0;
  std::optional<Deadline> reconnect_by;  // set at the first failed connect
  const Clock::time_point started = Clock::now();
  bool unreachable = false;  // the last failure was a connect, or a server refusing connections
  bool busy = false;         // ... the latter: at its connection limit
  int tries = 0;
  const auto again = [&] {
    if (unreachable && patient) return reconnects.Next(last, *reconnect_by);
    return retry.Next(last, deadline.at);
  };
  (void)reconnects.Next(last);  // its first "yes" is the first try, which `retry` counts
  while (again()) {
    ++tries;
    // The first try may reuse an idle connection; retries always connect afresh, since the
    // failure suggests the idle ones are stale too (e.g. the server restarted).
    std::unique_ptr<Connection> conn;
    if (tries == 1) {
      std::lock_guard lock(pool.mu);
      if (!pool.idle.empty()) {
        conn = std::move(pool.idle.back());
        pool.idle.pop_back();
      }
    }
    if (conn == nullptr) {
      // (reconnect_by is set whenever unreachable is.)
      const Deadline connected_by =
          std::min(After(options_.connect_timeout),
                   unreachable && patient ? reconnect_by.value_or(deadline.at) : deadline.at);
      auto socket = Connect(pool.address.host, pool.address.port, connected_by);
      Status st = socket ? ClientHandshake(*socket, secret_, connected_by) : socket.error();
      if (!st.ok()) {
        // A wrong secret or version will not fix itself: no retry, no failover.
        if (!st.retryable()) {
          out.status = st;
          return out;
        }
        last = st;
        // A connect that fails is a server away (restarting, partitioned), and one at its
        // connection limit (it answers the handshake with Unavailable: "too many
        // connections") is as good as away until a connection leaves: both get the patient
        // reconnects, so a moment's spike of clients costs a pause, not a training run. One
        // that connects but does not answer the handshake is there and frozen: the request's
        // deadline decides, as for any unanswered request.
        busy = socket.has_value() && st.code() == StatusCode::kUnavailable;
        unreachable = !socket || busy;
        if (unreachable && !reconnect_by) reconnect_by = After(options_.reconnect_timeout);
        continue;
      }
      if (unreachable) {  // back after a restart: the request's deadline starts again
        deadline.Progressed();
        unreachable = false;
      }
      connections_opened_.fetch_add(1);
      conn = std::make_unique<Connection>();
      conn->socket = std::move(*socket);
    }
    const uint32_t id = conn->next_id++;
    Status st = WriteFrame(conn->socket, type, id, payload, deadline.at);
    const bool sent = st.ok();
    if (st.ok()) st = ReadAnswer(*conn, id, data_into, deadline, &out.frame, &out.data_filled);
    if (!st.ok()) {
      // Whatever broke the exchange (a reset, a stall, a frame damaged on the wire), a fresh
      // connection may succeed: every such failure is retryable.
      last = st.Retryable();
      out.resent = out.resent || sent;
      pool.DropIdle();
      continue;
    }
    {
      std::lock_guard lock(pool.mu);
      if (pool.idle.size() < options_.max_idle_connections) pool.idle.push_back(std::move(conn));
    }
    if (out.frame.message_type() == MessageType::kError) {
      out.status = DecodeErrorPayload(out.frame.payload, pool.name);
    }
    pool.down_until_ns.store(0);
    return out;
  }
  pool.down_until_ns.store(NowNs() + std::chrono::nanoseconds(options_.down_penalty).count());
  out.connection_failure = true;
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  const std::string what =
      unreachable
          ? fmt::format("{}: {} tr{} over {:.1f} s ({}), the last: {}",
                        busy ? "kept refusing connections" : "could not be reached", tries,
                        tries == 1 ? "y" : "ies", seconds,
                        patient ? fmt::format("tried for up to {:g} s: $STOKER_RECONNECT_TIMEOUT",
                                              options_.reconnect_timeout.count() / 1000.0)
                                : "other servers left to try",
                        last.message())
          : fmt::format(
                "failed {} tr{} over {:.1f} s (deadline: {:g} s without an answer's "
                "bytes), the last: {}",
                tries, tries == 1 ? "y" : "ies", seconds, options_.request_timeout.count() / 1000.0,
                last.message());
  out.status = Status(last.IsTimeout() ? StatusCode::kTimeout : StatusCode::kUnavailable,
                      fmt::format("server {} {}", pool.name, what));
  return out;
}

Client::Answer Client::Call(std::string_view path, MessageType type, const std::string& payload,
                            std::span<std::byte> data_into) {
  Answer first_failure;
  const std::vector<size_t> order = ServerOrder(path);
  for (const size_t server : order) {
    Answer a = CallServer(server, server == order.back(), type, payload, data_into);
    if (a.status.ok()) return a;
    a.status = a.status.WithContext(Describe(path, a.server));
    if (!a.connection_failure && !a.status.IsNotFound()) return a;
    // Report the first server's failure unless a later one says something more specific than
    // NotFound (e.g. it is down).
    if (first_failure.server < 0 || (first_failure.status.IsNotFound() && a.connection_failure)) {
      first_failure = std::move(a);
    }
  }
  return first_failure;
}

namespace {

std::string PathRequest(std::string_view dataset, std::string_view path) {
  PayloadWriter w;
  w.String(dataset).String(path);
  return std::move(w.data());
}

Status UnexpectedAnswer(const Frame& f, MessageType want, const std::string& where) {
  return Status::Corruption(where + ": expected " + std::string(MessageTypeName(want)) +
                            ", got frame type " + std::to_string(f.type));
}

}  // namespace

Result<uint64_t> Client::Stat(std::string_view path) {
  STOKER_RETURN_IF_ERROR(ValidatePath(path, /*allow_root=*/false).WithContext(Describe("")));
  Answer a = Call(path, MessageType::kStat, PathRequest(uri_.dataset, path), {});
  if (!a.status.ok()) return Err(a.status);
  const std::string where = Describe(path, a.server);
  PayloadReader r(a.frame.payload);
  auto size = r.U64();
  if (a.frame.message_type() != MessageType::kStatOk || !size || !r.ExpectEnd().ok()) {
    return Err(UnexpectedAnswer(a.frame, MessageType::kStatOk, where));
  }
  return *size;
}

Status Client::Read(std::string_view path, uint64_t offset, std::span<std::byte> dst) {
  STOKER_RETURN_IF_ERROR(ValidatePath(path, /*allow_root=*/false).WithContext(Describe("")));
  while (!dst.empty()) {
    const size_t n = std::min<size_t>(dst.size(), kMaxReadLength);
    PayloadWriter w;
    w.String(uri_.dataset).String(path).U64(offset).U32(static_cast<uint32_t>(n));
    Answer a = Call(path, MessageType::kRead, w.data(), dst.first(n));
    if (!a.status.ok()) return a.status;
    if (a.frame.message_type() != MessageType::kData) {
      return UnexpectedAnswer(a.frame, MessageType::kData, Describe(path, a.server));
    }
    // ReadAnswer only fills dst for a DATA frame of exactly n bytes; anything else is a short
    // (or long) read, which is never success.
    if (!a.data_filled) {
      return Status::IOError(Describe(path, a.server) + ": short read: asked for " +
                             std::to_string(n) + " bytes at offset " + std::to_string(offset) +
                             ", got " + std::to_string(a.frame.payload.size()));
    }
    dst = dst.subspan(n);
    offset += n;
  }
  return Status::OK();
}

Status Client::CallWrite(std::string_view path, MessageType type, const std::string& payload,
                         bool* resent) {
  STOKER_RETURN_IF_ERROR(ValidatePath(path, /*allow_root=*/false).WithContext(Describe("")));
  if (pools_.size() != 1) {
    return Status::Unsupported(Describe(path) +
                               ": writes go to one server (a striped stoker:// URI is read-only)");
  }
  Answer a = CallServer(0, /*last_resort=*/true, type, payload, {});
  if (resent != nullptr) *resent = a.resent;
  if (!a.status.ok()) return a.status.WithContext(Describe(path, a.server));
  if (a.frame.message_type() != MessageType::kDone || !a.frame.payload.empty()) {
    return UnexpectedAnswer(a.frame, MessageType::kDone, Describe(path, a.server));
  }
  return Status::OK();
}

Status Client::Write(std::string_view path, uint64_t upload, uint64_t offset,
                     std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    const size_t n = std::min<size_t>(bytes.size(), kMaxWriteLength);
    PayloadWriter w;
    w.String(uri_.dataset).String(path).U64(upload).U64(offset);
    w.Bytes({reinterpret_cast<const char*>(bytes.data()), n});
    STOKER_RETURN_IF_ERROR(CallWrite(path, MessageType::kWrite, w.data()));
    bytes = bytes.subspan(n);
    offset += n;
  }
  return Status::OK();
}

Status Client::Finish(std::string_view path, uint64_t upload, uint64_t size, FinishMode mode) {
  PayloadWriter w;
  w.String(uri_.dataset).String(path).U64(upload).U64(size).U8(static_cast<uint8_t>(mode));
  return CallWrite(path, MessageType::kFinish, w.data());
}

Status Client::Remove(std::string_view path) {
  bool resent = false;
  Status st = CallWrite(path, MessageType::kRemove, PathRequest(uri_.dataset, path), &resent);
  // NotFound after a lost answer: the lost try removed it.
  if (st.IsNotFound() && resent) return Status::OK();
  return st;
}

Status Client::Rename(std::string_view from, std::string_view to) {
  STOKER_RETURN_IF_ERROR(ValidatePath(to, /*allow_root=*/false).WithContext(Describe("")));
  PayloadWriter w;
  w.String(uri_.dataset).String(from).String(to);
  bool resent = false;
  Status st = CallWrite(from, MessageType::kRename, w.data(), &resent);
  if (st.IsNotFound() && resent) {
    // The source is gone after a lost answer: done if the lost try moved it (the target is
    // there and the source is not). Writers rename only files they named uniquely.
    Result<uint64_t> source = Stat(from);
    if (!source && source.error().IsNotFound() && Stat(to).has_value()) return Status::OK();
  }
  return st;
}

Result<std::vector<std::string>> Client::List(std::string_view path) {
  STOKER_RETURN_IF_ERROR(ValidatePath(path, /*allow_root=*/true).WithContext(Describe("")));
  // With striping each server holds some of the chunk files, so a directory's entries are the
  // union over all servers.
  std::set<std::string> names;
  bool found = false;
  Answer failure;
  for (size_t s = 0; s < pools_.size(); ++s) {
    Answer a = CallServer(s, /*last_resort=*/pools_.size() == 1, MessageType::kList,
                          PathRequest(uri_.dataset, path), {});
    if (!a.status.ok()) {
      a.status = a.status.WithContext(Describe(path, a.server));
      if (!a.connection_failure && !a.status.IsNotFound()) return Err(a.status);
      if (failure.server < 0 || (failure.status.IsNotFound() && a.connection_failure)) {
        failure = std::move(a);
      }
      continue;
    }
    const std::string where = Describe(path, a.server);
    if (a.frame.message_type() != MessageType::kListOk) {
      return Err(UnexpectedAnswer(a.frame, MessageType::kListOk, where));
    }
    PayloadReader r(a.frame.payload);
    auto count = r.U32();
    if (!count) return Err(UnexpectedAnswer(a.frame, MessageType::kListOk, where));
    for (uint32_t i = 0; i < *count; ++i) {
      auto name = r.String();
      if (!name) return Err(name.error().WithContext(where));
      names.emplace(*name);
    }
    STOKER_RETURN_IF_ERROR(r.ExpectEnd().WithContext(where));
    found = true;
  }
  if (!found) return Err(failure.status);
  return std::vector<std::string>(names.begin(), names.end());
}

}  // namespace stoker::net
