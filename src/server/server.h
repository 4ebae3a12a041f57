// `stoker serve`: exports dataset directories over the stoker wire protocol
// (docs/protocol.md). One acceptor thread, one thread per connection (requests on a connection
// are answered in order, so pipelined requests simply wait in the socket), and an optional
// Prometheus /metrics endpoint on its own thread. Files are read through one Storage per
// dataset: a local directory's PosixStorage, or any storage given in ServerOptions::storages
// (a NAME=s3://… export, the node daemon's cache).
//
// Thread-safety: Start/Shutdown/Abort may be called from any thread; metrics() is safe to read
// at any time.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "net/protocol.h"
#include "server/metrics.h"
#include "stoker/status.h"
#include "stoker/storage.h"

namespace stoker::server {

// What a RequestHandler answers: a frame of `type` carrying `payload`, or `error` (sent as
// ERROR); `malformed`: the request's payload was, so the connection is closed after the ERROR,
// as for the protocol's own requests.
struct HandlerReply {
  net::MessageType type = net::MessageType::kError;
  std::string payload;
  Status error;
  bool malformed = false;
};
// Answers requests of a type the file protocol does not define (`stoker feed` answers MAKE);
// called on the connection's thread, one request of a connection at a time.
using RequestHandler = std::function<HandlerReply(std::string_view payload)>;

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 7070;                         // 0: an ephemeral port (see Server::port())
  std::map<std::string, std::string> datasets;  // exported name -> dataset directory
  // Every dataset directory under `root` too, by its name, found when first asked for: one
  // packed there after the server started is served as well, and on a writable server a new
  // name is created by its first pack (what a fresh cluster's first `stoker pack` needs).
  std::string root;
  // Accept WRITE, FINISH and REMOVE into the dataset directories (docs/protocol.md, "Writes"):
  // writers pack and append over stoker://. A directory need not hold a dataset yet (it is
  // created), so a first pack can go to it.
  bool writable = false;
  // Exported name -> any Storage (the node daemon exports its chunk cache this way). Served as
  // they are: no dataset check, no symbolic-link check (there is no directory behind them).
  std::map<std::string, std::shared_ptr<Storage>> storages;
  // Request types answered by the embedding program rather than from a dataset. A server with
  // handlers needs no dataset (a feeder exports none).
  std::map<net::MessageType, RequestHandler> handlers;
  std::string secret;     // at least 16 bytes
  int metrics_port = -1;  // -1: no /metrics endpoint; 0: ephemeral
  // More Prometheus text appended to /metrics (the node daemon's own counters).
  std::function<std::string()> extra_metrics;
  size_t max_connections = 1024;
  // Answer buffers of all connections together stay below this; must hold one largest answer.
  uint64_t memory_limit = uint64_t{1} << 30;
  std::chrono::milliseconds handshake_timeout{5000};
  std::chrono::milliseconds idle_timeout{10 * 60 * 1000};
  std::chrono::milliseconds frame_timeout{30000};  // a begun frame must be complete by then
  Status Validate() const;
};

class Server {
 public:
  // Checks the options and every dataset directory, binds the listeners, starts serving.
  // AlreadyExists if the port is in use.
  static Result<std::unique_ptr<Server>> Start(ServerOptions options);
  ~Server();  // Shutdown()

  uint16_t port() const;     // the bound port
  int metrics_port() const;  // the bound metrics port, or -1
  const ServerMetrics& metrics() const;

  // Graceful: stop accepting, let each connection finish the request it has read, close idle
  // connections, and join every thread. Idempotent.
  void Shutdown();
  // For tests: like a killed process, every connection is cut at once (no more answers).
  void Abort();

  struct State;

 private:
  explicit Server(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// Whether `dir` holds a stoker dataset: version records, or (format 1) a MANIFEST, so that an
// old dataset can still be served to `stoker upgrade`.
bool HoldsDataset(const std::filesystem::path& dir);

// Parses NAME=PATH into `datasets` (InvalidArgument on a bad spec or a duplicate name).
Status AddDatasetSpec(std::string_view spec, std::map<std::string, std::string>* datasets);
// Adds every subdirectory of `root` that holds a dataset (versions/, or a format-1 MANIFEST), named
// by its directory name.
Status AddDatasetRoot(const std::string& root, std::map<std::string, std::string>* datasets);

}  // namespace stoker::server
