#include "server/server.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "common/threads.h"
#include "format/manifest.h"
#include "format/version_record.h"
#include "net/auth.h"
#include "net/payload.h"
#include "server/server_state.h"
#include "storage/posix_storage.h"

namespace stoker::server {

Status ServerOptions::Validate() const {
  STOKER_RETURN_IF_ERROR(net::CheckSecret(secret, "the server configuration"));
  if (datasets.empty() && storages.empty() && root.empty() && handlers.empty()) {
    return Status::InvalidArgument("no datasets to serve");
  }
  if (max_connections == 0) return Status::InvalidArgument("max_connections must be >= 1");
  if (memory_limit < net::kMaxAnswerFrame) {
    return Status::InvalidArgument("memory_limit must hold at least one largest answer (" +
                                   std::to_string(net::kMaxAnswerFrame) + " bytes)");
  }
  if (metrics_port > 65535) return Status::InvalidArgument("bad metrics port");
  if (handshake_timeout.count() <= 0 || idle_timeout.count() <= 0 || frame_timeout.count() <= 0) {
    return Status::InvalidArgument("server timeouts must be positive");
  }
  return Status::OK();
}

namespace {

Status CheckDatasetName(std::string_view name) {
  if (name.empty() || name.size() > 255 || name.find('/') != std::string_view::npos ||
      name.find('\0') != std::string_view::npos || name == "." || name == "..") {
    return Status::InvalidArgument("bad dataset name '" + std::string(name) +
                                   "' (1-255 bytes, no '/')");
  }
  return Status::OK();
}

Status AddDataset(std::string name, std::string dir, std::map<std::string, std::string>* datasets) {
  STOKER_RETURN_IF_ERROR(CheckDatasetName(name));
  if (datasets->contains(name)) {
    return Status::InvalidArgument("dataset name '" + name + "' given twice");
  }
  datasets->emplace(std::move(name), std::move(dir));
  return Status::OK();
}

}  // namespace

Status AddDatasetSpec(std::string_view spec, std::map<std::string, std::string>* datasets) {
  const size_t eq = spec.find('=');
  if (eq == std::string_view::npos || eq + 1 == spec.size()) {
    return Status::InvalidArgument("bad --dataset '" + std::string(spec) + "': expected NAME=PATH");
  }
  return AddDataset(std::string(spec.substr(0, eq)), std::string(spec.substr(eq + 1)), datasets);
}

bool HoldsDataset(const std::filesystem::path& dir) {
  std::error_code ec;
  return std::filesystem::is_directory(dir / format::kVersionsDir, ec) ||
         std::filesystem::exists(dir / format::kManifestPath, ec);
}

Status AddDatasetRoot(const std::string& root, std::map<std::string, std::string>* datasets) {
  std::error_code ec;
  std::filesystem::directory_iterator it(root, ec);
  if (ec) return Status::FromErrno(ec.value(), "list dataset root " + root);
  std::vector<std::filesystem::path> dirs;
  for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
    if (it->is_directory(ec) && HoldsDataset(it->path())) dirs.push_back(it->path());
  }
  if (ec) return Status::FromErrno(ec.value(), "list dataset root " + root);
  std::sort(dirs.begin(), dirs.end());
  for (const auto& d : dirs) {
    STOKER_RETURN_IF_ERROR(AddDataset(d.filename().string(), d.string(), datasets));
  }
  return Status::OK();
}

Result<Server::State::Exported> Server::State::FindDataset(std::string_view name) {
  std::lock_guard lock(datasets_mu);
  if (auto it = datasets.find(std::string(name)); it != datasets.end()) return it->second;
  const auto missing = [&] {
    return Err(Status::NotFound("no dataset named '" + std::string(name) + "' on this server"));
  };
  if (options.root.empty() || !CheckDatasetName(name).ok()) return missing();
  const std::filesystem::path dir = std::filesystem::path(options.root) / std::string(name);
  std::error_code ec;
  if (std::filesystem::is_symlink(std::filesystem::symlink_status(dir, ec))) {
    return Err(Status::PermissionDenied("dataset '" + std::string(name) +
                                        "': refusing to serve a symbolic link"));
  }
  Exported found{storage::NewPosixStorage(dir.string()), dir.string()};
  if (HoldsDataset(dir)) {
    datasets.emplace(std::string(name), found);  // there to stay: served from now on
    return found;
  }
  // Not (yet) a dataset: a writable server still lets a first pack create it, but keeps no
  // entry for a name that may never be written (clients cannot grow this map by asking).
  if (options.writable) return found;
  return missing();
}

Server::Server(std::unique_ptr<State> state) : state_(std::move(state)) {}
Server::~Server() { Shutdown(); }

uint16_t Server::port() const { return state_->port; }
int Server::metrics_port() const { return state_->metrics_port; }
const ServerMetrics& Server::metrics() const { return state_->metrics; }

Result<std::unique_ptr<Server>> Server::Start(ServerOptions options) {
  STOKER_RETURN_IF_ERROR(options.Validate());
  auto state = std::make_unique<State>(std::move(options));
  const ServerOptions& o = state->options;
  for (const auto& [name, dir] : o.datasets) {
    std::error_code ec;
    if (o.writable && !std::filesystem::create_directories(dir, ec) && ec) {
      return Err(Status::FromErrno(ec.value(), "dataset '" + name + "': mkdir " + dir));
    }
    if (!o.writable && !HoldsDataset(dir)) {
      return Err(Status::InvalidArgument("dataset '" + name + "': " + dir +
                                         " is not a stoker dataset (no versions/)"));
    }
    state->datasets.emplace(name, State::Exported{storage::NewPosixStorage(dir), dir});
  }
  for (const auto& [name, storage] : o.storages) {
    STOKER_RETURN_IF_ERROR(CheckDatasetName(name));
    if (!state->datasets.emplace(name, State::Exported{storage, ""}).second) {
      return Err(Status::InvalidArgument("dataset name '" + name + "' given twice"));
    }
  }
  STOKER_ASSIGN_OR_RETURN(state->listener, net::Listen(o.host, o.port));
  STOKER_ASSIGN_OR_RETURN(state->port, net::BoundPort(state->listener));
  if (o.metrics_port >= 0) {
    STOKER_ASSIGN_OR_RETURN(state->metrics_listener,
                            net::Listen(o.host, static_cast<uint16_t>(o.metrics_port), 16));
    STOKER_ASSIGN_OR_RETURN(const uint16_t mp, net::BoundPort(state->metrics_listener));
    state->metrics_port = mp;
  }
  if (::pipe2(state->shutdown_pipe, O_CLOEXEC) != 0) {
    return Err(Status::FromErrno(errno, "pipe"));
  }
  State* s = state.get();
  s->acceptor = std::thread([s] { s->AcceptLoop(); });
  if (s->metrics_port >= 0) s->metrics_thread = std::thread([s] { s->MetricsLoop(); });
  return std::unique_ptr<Server>(new Server(std::move(state)));
}

size_t Server::State::ReapLocked() {
  for (auto it = connections.begin(); it != connections.end();) {
    if ((*it)->done.load()) {
      (*it)->thread.join();
      it = connections.erase(it);
    } else {
      ++it;
    }
  }
  return connections.size();
}

void Server::State::AcceptLoop() {
  while (true) {
    pollfd fds[2] = {{listener.fd(), POLLIN, 0}, {shutdown_pipe[0], POLLIN, 0}};
    // Wake now and then to reap finished connection threads even when nobody connects.
    const int n = ::poll(fds, 2, 1000);
    if (fds[1].revents != 0) break;
    {
      std::lock_guard lock(mu);
      ReapLocked();
    }
    if (n <= 0 || fds[0].revents == 0) continue;
    while (true) {
      auto accepted = net::Accept(listener);
      if (!accepted) break;
      std::lock_guard lock(mu);
      if (ReapLocked() >= options.max_connections) {
        metrics.connections_rejected.fetch_add(1);
        // Tell the client why before closing; a fresh socket's buffer takes these few bytes
        // without blocking, so the acceptor never waits on a client.
        const Status st(StatusCode::kUnavailable, "too many connections (the server's limit is " +
                                                      std::to_string(options.max_connections) +
                                                      ")");
        (void)net::WriteFrame(*accepted, net::MessageType::kError, 0, net::EncodeErrorPayload(st),
                              net::Clock::now());
        continue;
      }
      metrics.connections_accepted.fetch_add(1);
      auto c = std::make_unique<Connection>();
      c->socket = std::move(*accepted);
      Connection* raw = c.get();
      auto thread = StartThread([this, raw] {
        Serve(*raw);
        raw->done.store(true);
      });
      if (!thread) {  // the client is told, and may come back
        metrics.connections_rejected.fetch_add(1);
        (void)net::WriteFrame(raw->socket, net::MessageType::kError, 0,
                              net::EncodeErrorPayload(thread.error()), net::Clock::now());
        continue;
      }
      raw->thread = std::move(*thread);
      connections.push_back(std::move(c));
    }
  }
  listener.Close();  // stop accepting: new connections are refused by the kernel
}

void Server::Shutdown() {
  State& s = *state_;
  if (s.stopping.exchange(true)) {
    // Already stopping (or stopped): just wait for the threads if another caller has not.
  } else if (s.shutdown_pipe[1] >= 0) {
    ::close(s.shutdown_pipe[1]);
    s.shutdown_pipe[1] = -1;
  }
  if (s.acceptor.joinable()) s.acceptor.join();
  if (s.metrics_thread.joinable()) s.metrics_thread.join();
  std::list<std::unique_ptr<Connection>> rest;
  {
    std::lock_guard lock(s.mu);
    rest.swap(s.connections);
  }
  for (auto& c : rest) c->thread.join();
  if (s.shutdown_pipe[0] >= 0) {
    ::close(s.shutdown_pipe[0]);
    s.shutdown_pipe[0] = -1;
  }
}

void Server::Abort() {
  State& s = *state_;
  if (!s.stopping.exchange(true) && s.shutdown_pipe[1] >= 0) {
    ::close(s.shutdown_pipe[1]);
    s.shutdown_pipe[1] = -1;
  }
  if (s.acceptor.joinable()) s.acceptor.join();
  {
    std::lock_guard lock(s.mu);
    for (auto& c : s.connections) c->socket.ShutdownBoth();
  }
  Shutdown();
}

}  // namespace stoker::server
