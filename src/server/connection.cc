// Serving one connection: the handshake, then requests in order until the peer closes, idles
// out, breaks the protocol, or the server shuts down. Runs on the connection's own thread.
#include <filesystem>

#include "net/auth.h"
#include "net/payload.h"
#include "net/protocol.h"
#include "server/server_state.h"
#include "server/uploads.h"

namespace stoker::server {
namespace {

using net::MessageType;

// What a request handler produced: an answer frame, or an error to send as ERROR. `fatal`: the
// request was malformed, so the connection is closed after the ERROR.
struct Reply {
  MessageType type = MessageType::kError;
  std::string payload;
  std::unique_ptr<BudgetLease> lease;  // held until a DATA payload has been sent
  Status error;
  bool fatal = false;
};

Reply Fail(Status st, bool fatal = false) {
  Reply r;
  r.error = std::move(st);
  r.fatal = fatal;
  return r;
}

// Datasets hold only regular files and directories that `stoker pack` wrote. A symbolic link
// inside one could point anywhere on the server, so no component of a served path may be one.
Status RefuseSymlinks(const Server::State::Exported& dataset, std::string_view path) {
  if (dataset.dir.empty()) return Status::OK();  // an exported Storage, no directory
  std::filesystem::path p(dataset.dir);
  size_t start = 0;
  while (start <= path.size()) {
    const size_t slash = std::min(path.find('/', start), path.size());
    p /= std::string(path.substr(start, slash - start));
    std::error_code ec;
    if (std::filesystem::is_symlink(std::filesystem::symlink_status(p, ec))) {
      return Status::PermissionDenied(std::string(path) + ": refusing to serve a symbolic link");
    }
    start = slash + 1;
  }
  return Status::OK();
}

Reply Malformed(MessageType type) {
  return Fail(
      Status::InvalidArgument("malformed " + std::string(net::MessageTypeName(type)) + " request"),
      /*fatal=*/true);
}

// The per-connection state a handler needs: the server, and the last file it opened (a client
// reads a chunk in consecutive ranges, so this saves an open() per READ).
struct Session {
  Server::State& server;
  std::string open_key;
  std::unique_ptr<RandomAccessFile> open_file;

  Result<Server::State::Exported> Dataset(std::string_view name) {
    return server.FindDataset(name);
  }

  Result<RandomAccessFile*> Open(std::string_view dataset, std::string_view path) {
    std::string key = std::string(dataset) + '\0' + std::string(path);
    if (open_file == nullptr || key != open_key) {
      open_file.reset();
      STOKER_ASSIGN_OR_RETURN(const auto exported, Dataset(dataset));
      STOKER_RETURN_IF_ERROR(RefuseSymlinks(exported, path));
      STOKER_ASSIGN_OR_RETURN(open_file, exported.storage->OpenRead(path));
      open_key = std::move(key);
    }
    return open_file.get();
  }
};

// The (dataset, path) every request starts with.
struct Target {
  std::string_view dataset, path;
};

Result<Target> ParseTarget(net::PayloadReader& r) {
  Target t;
  STOKER_ASSIGN_OR_RETURN(t.dataset, r.String());
  STOKER_ASSIGN_OR_RETURN(t.path, r.String());
  return t;
}

Reply HandleStat(Session& s, std::string_view payload) {
  net::PayloadReader r(payload);
  auto t = ParseTarget(r);
  if (!t || !r.ExpectEnd().ok()) return Malformed(MessageType::kStat);
  if (Status st = net::ValidatePath(t->path, false); !st.ok()) return Fail(st);
  auto file = s.Open(t->dataset, t->path);
  if (!file) return Fail(file.error());
  Reply reply;
  reply.type = MessageType::kStatOk;
  net::PayloadWriter w;
  w.U64((*file)->Size());
  reply.payload = std::move(w.data());
  return reply;
}

Reply HandleRead(Session& s, std::string_view payload) {
  net::PayloadReader r(payload);
  auto t = ParseTarget(r);
  auto offset = r.U64();
  auto length = r.U32();
  if (!t || !offset || !length || !r.ExpectEnd().ok()) return Malformed(MessageType::kRead);
  if (Status st = net::ValidatePath(t->path, false); !st.ok()) return Fail(st);
  if (*length > net::kMaxReadLength) {
    return Fail(Status::InvalidArgument("READ of " + std::to_string(*length) +
                                        " bytes exceeds the limit of " +
                                        std::to_string(net::kMaxReadLength)));
  }
  auto file = s.Open(t->dataset, t->path);
  if (!file) return Fail(file.error());
  Reply reply;
  // The answer buffer is the big one: wait for room in the shared budget before allocating it.
  reply.lease = std::make_unique<BudgetLease>(s.server.budget, *length);
  reply.payload.resize(*length);
  if (Status st = (*file)->ReadAt(
          *offset, std::as_writable_bytes(std::span(reply.payload.data(), reply.payload.size())));
      !st.ok()) {
    return Fail(st);
  }
  reply.type = MessageType::kData;
  return reply;
}

Reply HandleList(Session& s, std::string_view payload) {
  net::PayloadReader r(payload);
  auto t = ParseTarget(r);
  if (!t || !r.ExpectEnd().ok()) return Malformed(MessageType::kList);
  if (Status st = net::ValidatePath(t->path, true); !st.ok()) return Fail(st);
  auto exported = s.Dataset(t->dataset);
  if (!exported) return Fail(exported.error());
  if (Status st = RefuseSymlinks(*exported, t->path); !st.ok()) return Fail(st);
  auto names = exported->storage->List(t->path);
  if (!names) return Fail(names.error());
  net::PayloadWriter w;
  w.U32(static_cast<uint32_t>(names->size()));
  for (const std::string& n : *names) w.String(n);
  if (!w.status().ok()) return Fail(w.status());
  if (w.data().size() > net::kMaxAnswerFrame) {
    return Fail(Status::ResourceExhausted("directory '" + std::string(t->path) +
                                          "' has too many entries for one LIST answer"));
  }
  Reply reply;
  reply.type = MessageType::kListOk;
  reply.payload = std::move(w.data());
  return reply;
}

// The directory a write goes to: only directory datasets of a --writable server, and only the
// parts of a dataset that writers write.
Result<std::string> WritableDir(Session& s, const Target& t) {
  if (!s.server.options.writable) {
    return Err(Status::PermissionDenied(
        "this server is read-only (`stoker serve --writable` accepts writes)"));
  }
  STOKER_RETURN_IF_ERROR(net::ValidatePath(t.path, false));
  STOKER_RETURN_IF_ERROR(CheckWritablePath(t.path));
  STOKER_ASSIGN_OR_RETURN(const auto exported, s.Dataset(t.dataset));
  if (exported.dir.empty()) {
    return Err(Status::Unsupported("dataset '" + std::string(t.dataset) + "' is not writable"));
  }
  // A new name under --root: its first write creates it (as Start does for --dataset).
  std::error_code ec;
  if (!std::filesystem::create_directory(exported.dir, ec) && ec) {
    return Err(Status::FromErrno(
        ec.value(), "dataset '" + std::string(t.dataset) + "': mkdir " + exported.dir));
  }
  // A file this connection has open may be the one that changes.
  s.open_file.reset();
  s.open_key.clear();
  return exported.dir;
}

Reply Done(const Status& st) {
  if (!st.ok()) return Fail(st);
  Reply reply;
  reply.type = MessageType::kDone;
  return reply;
}

Reply HandleWrite(Session& s, std::string_view payload) {
  net::PayloadReader r(payload);
  auto t = ParseTarget(r);
  auto upload = r.U64();
  auto offset = r.U64();
  auto bytes = r.Bytes();
  if (!t || !upload || !offset || !bytes || !r.ExpectEnd().ok())
    return Malformed(MessageType::kWrite);
  if (bytes->size() > net::kMaxWriteLength) return Malformed(MessageType::kWrite);
  auto dir = WritableDir(s, *t);
  if (!dir) return Fail(dir.error());
  return Done(WriteUpload(*dir, t->path, *upload, *offset, *bytes));
}

Reply HandleFinish(Session& s, std::string_view payload) {
  net::PayloadReader r(payload);
  auto t = ParseTarget(r);
  auto upload = r.U64();
  auto size = r.U64();
  auto mode = r.U8();
  if (!t || !upload || !size || !mode || !r.ExpectEnd().ok() ||
      *mode > static_cast<uint8_t>(net::FinishMode::kAbort)) {
    return Malformed(MessageType::kFinish);
  }
  auto dir = WritableDir(s, *t);
  if (!dir) return Fail(dir.error());
  return Done(FinishUpload(*dir, t->path, *upload, *size, static_cast<net::FinishMode>(*mode)));
}

Reply HandleRemove(Session& s, std::string_view payload) {
  net::PayloadReader r(payload);
  auto t = ParseTarget(r);
  if (!t || !r.ExpectEnd().ok()) return Malformed(MessageType::kRemove);
  auto dir = WritableDir(s, *t);
  if (!dir) return Fail(dir.error());
  return Done(RemoveFile(*dir, t->path));
}

Reply HandleRename(Session& s, std::string_view payload) {
  net::PayloadReader r(payload);
  auto from = ParseTarget(r);
  auto to = r.String();
  if (!from || !to || !r.ExpectEnd().ok()) return Malformed(MessageType::kRename);
  auto dir = WritableDir(s, *from);
  if (!dir) return Fail(dir.error());
  auto target = WritableDir(s, Target{from->dataset, *to});
  if (!target) return Fail(target.error());
  return Done(RenameFile(*dir, from->path, *to));
}

Reply Handle(Session& s, const net::Frame& frame) {
  switch (frame.message_type()) {
    case MessageType::kStat:
      return HandleStat(s, frame.payload);
    case MessageType::kRead:
      return HandleRead(s, frame.payload);
    case MessageType::kList:
      return HandleList(s, frame.payload);
    case MessageType::kWrite:
      return HandleWrite(s, frame.payload);
    case MessageType::kFinish:
      return HandleFinish(s, frame.payload);
    case MessageType::kRename:
      return HandleRename(s, frame.payload);
    case MessageType::kRemove:
      return HandleRemove(s, frame.payload);
    default:
      break;
  }
  const auto& handlers = s.server.options.handlers;
  if (auto h = handlers.find(frame.message_type()); h != handlers.end()) {
    HandlerReply answer = h->second(frame.payload);
    if (!answer.error.ok()) return Fail(std::move(answer.error), answer.malformed);
    Reply r;
    r.type = answer.type;
    r.payload = std::move(answer.payload);
    return r;
  }
  return Fail(Status::Unsupported("unknown request type " + std::to_string(frame.type)));
}

// Sends header and payload separately: a 16 MiB DATA payload is not copied into a frame buffer.
Status SendFrame(net::Socket& socket, MessageType type, uint32_t id, std::string_view payload,
                 net::Deadline deadline) {
  const auto bytes = std::as_bytes(std::span(payload.data(), payload.size()));
  const auto header = net::EncodeHeader(type, id, bytes);
  STOKER_RETURN_IF_ERROR(socket.SendAll(header, deadline));
  return socket.SendAll(bytes, deadline);
}

}  // namespace

void Server::State::Serve(Connection& c) {
  net::Socket& socket = c.socket;
  metrics.connections_open.fetch_add(1);
  // However this ends, the peer sees the close at once; the fd itself is closed when the
  // acceptor reaps this connection (so Abort() never shuts down a reused descriptor).
  struct Finish {
    ServerMetrics& m;
    net::Socket& s;
    ~Finish() {
      s.ShutdownBoth();
      m.connections_open.fetch_sub(1);
    }
  } finish{metrics, socket};

  bool auth_failed = false;
  if (Status st = net::ServerHandshake(socket, options.secret,
                                       net::After(options.handshake_timeout), &auth_failed);
      !st.ok()) {
    (auth_failed ? metrics.auth_failures : metrics.handshake_failures).fetch_add(1);
    return;
  }

  Session session{*this, {}, nullptr};
  while (true) {
    // A connection that goes idle lets go of its open file: for the node daemon that file pins
    // a cached chunk, which must not stay unevictable because a peer keeps a pooled connection.
    if (!socket.WaitReadable(net::Clock::now()).ok()) {
      session.open_file.reset();
      session.open_key.clear();
    }
    // Between frames the connection may idle; shutdown wakes this wait (and only this one: a
    // request that has begun to arrive is read and answered).
    Status st = socket.WaitReadable(net::After(options.idle_timeout), shutdown_pipe[0]);
    if (st.IsTimeout()) metrics.idle_closed.fetch_add(1);
    if (!st.ok()) return;
    // Only WRITE requests may be large; their buffers come out of the shared memory budget.
    std::unique_ptr<BudgetLease> request_lease;
    auto frame =
        net::ReadFrame(socket, net::kMaxWriteRequestFrame, net::After(options.frame_timeout),
                       [&](const net::FrameHeader& h) -> Status {
                         if (h.length <= net::kMaxRequestFrame) return Status::OK();
                         if (h.type != static_cast<uint8_t>(MessageType::kWrite)) {
                           return Status::ResourceExhausted("request frame of " +
                                                            std::to_string(h.length) + " bytes");
                         }
                         request_lease = std::make_unique<BudgetLease>(budget, h.length);
                         return Status::OK();
                       });
    if (!frame) {
      // A clean close between frames is the peer's right; anything else is a broken or hostile
      // peer (bad CRC, oversized, too slow).
      if (!frame.error().IsUnavailable()) metrics.protocol_errors.fetch_add(1);
      return;
    }
    const auto kind = ServerMetrics::KindOf(frame->message_type());
    Reply reply = Handle(session, *frame);
    const net::Deadline send_deadline = net::After(options.frame_timeout);
    if (!reply.error.ok()) {
      metrics.CountRequest(kind, 0);
      metrics.CountError(reply.error.code());
      if (!net::WriteFrame(socket, MessageType::kError, frame->request_id,
                           net::EncodeErrorPayload(reply.error), send_deadline)
               .ok() ||
          reply.fatal) {
        return;
      }
      continue;
    }
    metrics.CountRequest(kind, reply.payload.size());
    if (!SendFrame(socket, reply.type, frame->request_id, reply.payload, send_deadline).ok()) {
      return;
    }
  }
}

}  // namespace stoker::server
