// The daemon's side of the trainer socket (trainer_protocol.h): one thread per trainer
// connection; chunks go out as sealed memfd descriptors.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include <fmt/format.h>

#include "common/threads.h"
#include "format/version_record.h"
#include "net/payload.h"
#include "node/node_state.h"
#include "node_client/trainer_protocol.h"

namespace stoker::node {
namespace {

// A trainer may read another version of the daemon's dataset (an older one it pinned, a newer
// one published since the daemon started): chunks are immutable and their ids unique, so the
// daemon serves the chunks the two versions share and the trainer reads the rest from the store.
// Versions of one dataset share its first segment, whose id is random.
bool SameDataset(std::string_view theirs, std::string_view ours) {
  if (theirs == ours) return true;
  auto a = format::ParseVersionRecord(theirs), b = format::ParseVersionRecord(ours);
  return a && b && !a->segments.empty() && !b->segments.empty() &&
         a->segments.front().id == b->segments.front().id;
}

}  // namespace
namespace {

constexpr auto kReplyTimeout = std::chrono::seconds(10);
// A trainer may stay quiet for a whole validation pass; the socket, not a timer, says it left.
constexpr auto kIdleForever = std::chrono::hours(24 * 365);

// A plan visits each read unit (a chunk, or a block of whole files) once per epoch, so it
// never has more entries than the dataset has files: a longer one is refused, not stored.
uint64_t MaxPlanEntries(const std::vector<format::ChunkInfo>& chunks) {
  uint64_t max_plan_entries = chunks.size();
  for (const format::ChunkInfo& chunk : chunks) max_plan_entries += chunk.entry_count;
  return std::min<uint64_t>(max_plan_entries, UINT32_MAX);
}

// One trainer connection, across its requests.
struct TrainerSession {
  Node::State& state;
  uint64_t plan;  // the connection's plan in the cache
  uint64_t max_plan_entries;
  std::vector<ChunkCache::PlannedChunk> order{};  // the current plan, known chunks only
  uint32_t plan_entries = 0;  // entries received for the current plan, known chunks or not
  bool greeted = false;
};

// The answer to one request.
struct TrainerReply {
  std::string payload;
  int fd = -1;
  std::shared_ptr<const CachedChunk> held;  // alive until the descriptor is sent
  bool close_after = false;
};

TrainerReply ErrorReply(const Status& status, bool close_after) {
  TrainerReply reply;
  reply.payload = net::EncodeErrorPayload(status);
  reply.close_after = close_after;
  return reply;
}

TrainerReply AnswerHello(TrainerSession& session, net::PayloadReader& r) {
  const NodeOptions& options = session.state.options;
  auto theirs = r.Bytes();
  if (!theirs || !r.ExpectEnd().ok()) {
    return ErrorReply(Status::InvalidArgument("malformed HELLO"), /*close_after=*/true);
  }
  if (!SameDataset(*theirs, session.state.manifest)) {
    return ErrorReply(
        Status::InvalidArgument(fmt::format(
            "the node daemon of job {} serves another dataset or version ({}) than this trainer "
            "opened",
            options.job, options.store_uri)),
        /*close_after=*/false);
  }
  session.greeted = true;
  net::PayloadWriter w;
  w.String(options.job);
  TrainerReply reply;
  reply.payload = net::EncodeErrorPayload(Status::OK()) + w.data();
  return reply;
}

TrainerReply AnswerGet(TrainerSession& session, net::PayloadReader& r) {
  Node::State& state = session.state;
  auto id = r.U64();
  auto it = id ? state.chunk_index.find(*id) : state.chunk_index.end();
  if (!id || !r.ExpectEnd().ok()) {
    return ErrorReply(Status::InvalidArgument("malformed GET"), /*close_after=*/true);
  }
  if (it == state.chunk_index.end()) {
    return ErrorReply(Status::NotFound(fmt::format("no chunk {:016x} in the dataset", *id)),
                      /*close_after=*/false);
  }
  auto chunk = state.ForTrainer(it->second);
  if (!chunk) return ErrorReply(chunk.error(), /*close_after=*/false);
  TrainerReply reply;
  reply.held = *chunk;
  net::PayloadWriter w;
  w.U64(reply.held->size());
  reply.payload = net::EncodeErrorPayload(Status::OK()) + w.data();
  reply.fd = reply.held->fd();
  return reply;
}

TrainerReply AnswerPlan(TrainerSession& session, net::PayloadReader& r) {
  Node::State& state = session.state;
  auto first = r.U8();
  auto count = r.U32();
  bool ok = first && count && *count <= kPlanIdsPerMessage;
  if (ok && *first != 0) {
    session.order.clear();
    session.plan_entries = 0;
  }
  const bool too_long = ok && session.plan_entries + uint64_t{*count} > session.max_plan_entries;
  ok = ok && !too_long;
  for (uint32_t i = 0; ok && i < *count; ++i) {
    auto id = r.U64();
    auto until = r.U32();
    ok = id.has_value() && until.has_value();
    if (ok) {
      if (auto it = state.chunk_index.find(*id); it != state.chunk_index.end()) {
        session.order.push_back({it->second, session.plan_entries, *until});
      }
      ++session.plan_entries;
    }
  }
  if (!ok || !r.ExpectEnd().ok()) {
    return ErrorReply(
        Status::InvalidArgument(
            too_long ? fmt::format("PLAN of more than {} entries: the dataset has no more read "
                                   "units",
                                   session.max_plan_entries)
                     : std::string("malformed PLAN")),
        /*close_after=*/true);
  }
  state.cache->SetPlan(session.plan, session.order);
  if (state.prefetcher) state.prefetcher->Wake();
  return ErrorReply(Status::OK(), /*close_after=*/false);
}

TrainerReply Answer(TrainerSession& session, std::string_view message) {
  net::PayloadReader r(message);
  auto type = r.U8();
  if (!type) return ErrorReply(Status::InvalidArgument("empty request"), /*close_after=*/true);
  if (*type == static_cast<uint8_t>(TrainerRequest::kHello)) return AnswerHello(session, r);
  if (!session.greeted) {
    return ErrorReply(Status::InvalidArgument("HELLO first"), /*close_after=*/true);
  }
  if (*type == static_cast<uint8_t>(TrainerRequest::kGet)) return AnswerGet(session, r);
  if (*type == static_cast<uint8_t>(TrainerRequest::kPlan)) return AnswerPlan(session, r);
  return ErrorReply(Status::Unsupported(fmt::format("unknown request type {}", *type)),
                    /*close_after=*/true);
}

}  // namespace

Status Node::State::StartTrainerService() {
  const std::string& path = options.socket_path;
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) {
    return Status::InvalidArgument("trainer socket path too long: " + path);
  }
  // A socket file left by a daemon that was killed is removed; one a live daemon answers on is not.
  if (ConnectUnix(path).has_value()) {
    return Status::AlreadyExists("another node daemon is serving " + path);
  }
  ::unlink(path.c_str());
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  listen_fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd < 0) return Status::FromErrno(errno, "socket");
  if (::bind(listen_fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    return Status::FromErrno(errno, "bind trainer socket " + path);
  }
  // Chunk bytes are the dataset's: only the daemon's user (and root) may ask for them.
  ::chmod(path.c_str(), 0600);
  if (::listen(listen_fd, 128) != 0) return Status::FromErrno(errno, "listen on " + path);
  if (::pipe2(stop_pipe, O_CLOEXEC) != 0) return Status::FromErrno(errno, "pipe");
  acceptor = std::thread([this] { AcceptTrainers(); });
  return Status::OK();
}

void Node::State::AcceptTrainers() {
  while (true) {
    pollfd fds[2] = {{listen_fd, POLLIN, 0}, {stop_pipe[0], POLLIN, 0}};
    const int n = ::poll(fds, 2, 1000);
    if (fds[1].revents != 0) break;
    std::lock_guard lock(trainers_mu);
    for (auto it = trainers.begin(); it != trainers.end();) {  // reap finished connections
      if ((*it)->done.load()) {
        (*it)->thread.join();
        it = trainers.erase(it);
      } else {
        ++it;
      }
    }
    if (n <= 0 || fds[0].revents == 0) continue;
    while (true) {
      const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) break;
      auto c = std::make_unique<TrainerConnection>();
      c->socket = net::Socket(fd, options.socket_path);
      TrainerConnection* raw = c.get();
      auto thread = StartThread([this, raw] {
        ServeTrainer(*raw);
        raw->done.store(true);
      });
      if (!thread) continue;  // the trainer sees the socket close and reads from the store
      raw->thread = std::move(*thread);
      trainers.push_back(std::move(c));
    }
  }
}

void Node::State::ServeTrainer(TrainerConnection& c) {
  counters.trainer_connections.fetch_add(1);
  TrainerSession session{
      .state = *this, .plan = cache->AddPlan(), .max_plan_entries = MaxPlanEntries(chunks)};
  while (true) {
    int passed = -1;
    auto message = ReceiveMessage(
        c.socket, &passed,
        net::After(std::chrono::duration_cast<std::chrono::milliseconds>(kIdleForever)),
        stop_pipe[0]);
    if (passed >= 0) ::close(passed);  // trainers send no descriptors
    if (!message) break;
    const TrainerReply reply = Answer(session, *message);
    if (!SendMessage(c.socket, reply.payload, reply.fd, net::After(kReplyTimeout)).ok() ||
        reply.close_after)
      break;
  }
  cache->RemovePlan(session.plan);
  counters.trainer_connections.fetch_sub(1);
  c.socket.ShutdownBoth();
}

void Node::State::StopTrainerService() {
  if (stop_pipe[1] >= 0) {
    ::close(stop_pipe[1]);
    stop_pipe[1] = -1;
  }
  if (acceptor.joinable()) acceptor.join();
  std::list<std::unique_ptr<TrainerConnection>> rest;
  {
    std::lock_guard lock(trainers_mu);
    rest.swap(trainers);
  }
  for (auto& c : rest) c->thread.join();
  if (listen_fd >= 0) {
    ::close(listen_fd);
    listen_fd = -1;
    ::unlink(options.socket_path.c_str());
  }
  if (stop_pipe[0] >= 0) {
    ::close(stop_pipe[0]);
    stop_pipe[0] = -1;
  }
}

}  // namespace stoker::node
