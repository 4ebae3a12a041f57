// The protocol client behind stoker:// storage: one pool of authenticated connections per
// server, requests with retries on fresh connections, and striping/failover across servers
// (docs/protocol.md, "Striping").
//
// Thread-safe: concurrent calls take different connections from the pool (or open new ones), so
// many reader threads never queue behind one socket.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "common/retry.h"
#include "net/frame.h"
#include "net/socket.h"
#include "net/uri.h"
#include "stoker/status.h"

namespace stoker::net {

struct ClientOptions {
  std::chrono::milliseconds connect_timeout{5000};  // TCP connect + handshake
  // The one deadline of every request (docs/protocol.md, "Deadlines"): a request fails with
  // Timeout once the server has sent nothing for this long — counted from the request's start,
  // and while a large answer streams in, from its latest bytes (a big read that progresses is
  // never cut off). Retries share it. $STOKER_TIMEOUT ("30s", "2m", seconds) sets it for
  // stoker:// URIs opened from the environment.
  std::chrono::milliseconds request_timeout{30000};
  // A request that fails for connection reasons (reset, EOF, timeout, a broken frame: the
  // retryable codes) is tried again on a fresh connection by this policy, while its deadline
  // lasts (src/common/retry.h).
  RetryPolicy retry{.max_attempts = 4, .base_backoff = std::chrono::milliseconds(10)};
  // A server that cannot be reached (connection refused or unanswered: it restarts, a brief
  // partition) is tried again, with pauses growing to a second, for this long from the first
  // failed connect, when it is the last server a request can go to; 0: as any other failure
  // (`retry`). stoker:// URIs opened by users take $STOKER_RECONNECT_TIMEOUT, 60 s by default;
  // a job cache's peers fail over at once instead.
  std::chrono::milliseconds reconnect_timeout{0};
  RetryPolicy reconnect_retry{.max_attempts = 1 << 20,
                              .base_backoff = std::chrono::milliseconds(50),
                              .max_backoff = std::chrono::milliseconds(1000)};
  // After a server failed every try, it is tried last for this long (others go first).
  std::chrono::milliseconds down_penalty{2000};
  size_t max_idle_connections = 64;  // per server
  Status Validate() const;
};

class Client {
 public:
  static Result<std::shared_ptr<Client>> Create(StokerUri uri, std::string secret,
                                                ClientOptions options = {});
  ~Client();

  const StokerUri& uri() const { return uri_; }
  // "stoker://host:port/name/path" for one server, or with every server listed (`server` < 0).
  std::string Describe(std::string_view path, int server = -1) const;

  // Size of `path` (STAT), from the first server in the path's striping order that has it.
  Result<uint64_t> Stat(std::string_view path);
  // Exactly dst.size() bytes from `offset` (READ), split into requests of at most
  // kMaxReadLength bytes.
  Status Read(std::string_view path, uint64_t offset, std::span<std::byte> dst);
  // The union of the entry names of directory `path` on every server that answers.
  Result<std::vector<std::string>> List(std::string_view path);

  // Writes (a server started with --writable; one server, not a striped URI):
  // `bytes` into upload `upload` of `path` at `offset`, in requests of at most kMaxWriteLength.
  Status Write(std::string_view path, uint64_t upload, uint64_t offset,
               std::span<const std::byte> bytes);
  // Ends an upload of `size` bytes (FinishMode: replace, create exclusively, or abort).
  Status Finish(std::string_view path, uint64_t upload, uint64_t size, FinishMode mode);
  Status Remove(std::string_view path);
  Status Rename(std::string_view from, std::string_view to);

  // Connections opened so far (for tests of pooling).
  uint64_t connections_opened() const { return connections_opened_.load(); }

  struct Pool;  // per-server connections; defined in client.cc

 private:
  Client(StokerUri uri, std::string secret, ClientOptions options);
  struct Answer;
  // One request to one server, retried on fresh connections after connection failures.
  // `last_resort`: no other server is left to try (reconnect_timeout applies).
  Answer CallServer(size_t server, bool last_resort, MessageType type, const std::string& payload,
                    std::span<std::byte> data_into);
  // CallServer over the servers in `path`'s striping order, moving on after NotFound or a
  // connection failure.
  Answer Call(std::string_view path, MessageType type, const std::string& payload,
              std::span<std::byte> data_into);
  std::vector<size_t> ServerOrder(std::string_view path) const;
  // A write request to the one server; DONE expected. `resent`: whether a try whose answer was
  // lost had sent it (the server may have carried it out already).
  Status CallWrite(std::string_view path, MessageType type, const std::string& payload,
                   bool* resent = nullptr);

  const StokerUri uri_;
  const std::string secret_;
  const ClientOptions options_;
  std::vector<std::unique_ptr<Pool>> pools_;
  std::atomic<uint64_t> connections_opened_{0};
};

}  // namespace stoker::net
