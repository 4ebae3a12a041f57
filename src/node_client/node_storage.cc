#include "node_client/node_storage.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <list>
#include <mutex>
#include <unordered_map>

#include <fmt/format.h>

#include "common/log.h"
#include "format/chunk.h"
#include "format/versions.h"
#include "net/payload.h"
#include "node_client/cached_chunk.h"
#include "node_client/trainer_protocol.h"
#include "storage/forwarding_storage.h"

namespace stoker::node {
namespace {

constexpr auto kRequestTimeout = std::chrono::seconds(60);  // a fill may wait on the store
constexpr auto kRetryAfter = std::chrono::seconds(1);
constexpr size_t kKeptMappings = 8;
// How long a read waits for a chunk the daemon is still filling to make progress before it
// reads the store instead.
constexpr std::chrono::milliseconds kFillStall{60000};
constexpr size_t kIdleConnections = 16;

// A chunk mapped read-only from the daemon's memfd: complete, or still filling (then reads
// wait for the bytes they need to be verified, cached_chunk.h). It keeps the daemon's watch
// connection (NodeLink::Watch): when the daemon dies mid-fill, that connection hangs up and the
// wait ends at once (else only after kFillStall).
class Mapping {
 public:
  Mapping(const std::byte* data, uint64_t size, uint64_t mapped, bool with_marks,
          std::shared_ptr<const net::Socket> watch)
      : data_(data),
        size_(size),
        mapped_(mapped),
        with_marks_(with_marks),
        watch_(std::move(watch)) {}
  ~Mapping() { ::munmap(const_cast<std::byte*>(data_), mapped_); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  std::span<const std::byte> bytes() const { return {data_, size_}; }
  Status WaitFor(uint64_t offset, uint64_t n) const {
    if (!with_marks_) return Status::OK();  // sealed whole by a daemon before cut-through
    return WaitForVerified(data_ + VerifiedMarkOffset(size_), size_, offset, n, kFillStall,
                           watch_ ? watch_->fd() : -1);
  }

 private:
  const std::byte* data_;
  uint64_t size_, mapped_;
  bool with_marks_;
  std::shared_ptr<const net::Socket> watch_;  // nullptr: none could be opened
};

// Every reply starts with a status (net::ReadStatus); a malformed one is the daemon's fault.
Status DecodeStatus(net::PayloadReader& r) {
  std::optional<Status> st = net::ReadStatus(r);
  return st ? *st : Status::Corruption("malformed reply from the node daemon");
}

// Owns a descriptor received from the daemon.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Connections to the daemon, the plan, and the kept mappings.
class NodeLink {
 public:
  NodeLink(std::shared_ptr<Storage> store, std::string path)
      : store_(std::move(store)), path_(std::move(path)) {}

  // The chunk's bytes from the daemon, or why not (the caller reads the store instead).
  Result<std::shared_ptr<const Mapping>> Chunk(uint64_t id) {
    {
      std::lock_guard lock(mu_);
      for (auto it = kept_.begin(); it != kept_.end(); ++it) {
        if (it->first == id) {
          kept_.splice(kept_.begin(), kept_, it);  // most recent first
          return it->second;
        }
      }
      if (net::Clock::now() < retry_at_) {
        return Err(Status::Unavailable("node daemon unavailable"));
      }
    }
    auto mapped = Fetch(id);
    std::lock_guard lock(mu_);
    if (!mapped) {
      if (stats_.node_failures++ == 0) {
        // Once per dataset: a daemon that is not there must not go unnoticed, nor flood the log.
        log::Warning("", fmt::format("{}={}: {}; reading from the store instead (every failure "
                                     "counts in stats()['node_failures'])",
                                     kNodeSocketEnv, path_, mapped.error().ToString()));
      }
      retry_at_ = net::Clock::now() + kRetryAfter;
      // The daemon may have died: its connections are dead, and a restarted one needs the plan.
      idle_.clear();
      control_.Close();
      watch_.reset();  // the mappings from the old daemon keep theirs
      plan_sent_ = false;
      return Err(mapped.error());
    }
    kept_.emplace_front(id, *mapped);
    if (kept_.size() > kKeptMappings) kept_.pop_back();
    return *mapped;
  }

  void Forget(uint64_t id) {
    std::lock_guard lock(mu_);
    kept_.remove_if([id](const auto& kept) { return kept.first == id; });
  }

  void SetPlan(std::vector<std::pair<uint64_t, uint32_t>> ids) {
    std::lock_guard lock(mu_);
    plan_ = std::move(ids);
    plan_sent_ = false;
    (void)SendPlanLocked();
  }

  void Count(bool from_node) {
    std::lock_guard lock(mu_);
    ++(from_node ? stats_.node_reads : stats_.store_reads);
  }
  NodeStorageStats stats() const {
    std::lock_guard lock(mu_);
    return stats_;
  }
  const std::shared_ptr<Storage>& store() const { return store_; }

 private:
  // A greeted connection: idle or new. The HELLO carries the newest version's record so that a
  // daemon of another dataset or version refuses us instead of serving the wrong chunks.
  Result<net::Socket> Connection() {
    {
      std::lock_guard lock(mu_);
      if (!idle_.empty()) {
        net::Socket socket = std::move(idle_.back());
        idle_.pop_back();
        return socket;
      }
    }
    return NewConnection();
  }

  // A new greeted connection, never one of the pool: for the plan and the watch, whose
  // connections must close exactly when this link closes them.
  Result<net::Socket> NewConnection() {
    STOKER_ASSIGN_OR_RETURN(net::Socket socket, ConnectUnix(path_));
    if (manifest_.empty()) {
      STOKER_ASSIGN_OR_RETURN(auto latest, format::ReadLatestVersion(*store_));
      if (!latest) return Err(Status::NotFound(store_->Describe("") + " holds no dataset"));
      manifest_ = format::EncodeVersionRecord(*latest);
    }
    net::PayloadWriter w;
    w.U8(static_cast<uint8_t>(TrainerRequest::kHello)).Bytes(manifest_);
    STOKER_RETURN_IF_ERROR(SendMessage(socket, w.data(), -1, net::After(kRequestTimeout)));
    int passed = -1;
    STOKER_ASSIGN_OR_RETURN(auto reply,
                            ReceiveMessage(socket, &passed, net::After(kRequestTimeout)));
    FdCloser unexpected(passed);
    net::PayloadReader r(reply);
    STOKER_RETURN_IF_ERROR(DecodeStatus(r));
    return socket;
  }

  void Return(net::Socket socket) {
    std::lock_guard lock(mu_);
    if (idle_.size() < kIdleConnections) idle_.push_back(std::move(socket));
  }

  Result<std::shared_ptr<const Mapping>> Fetch(uint64_t id) {
    {
      std::lock_guard lock(mu_);
      if (!plan_sent_) (void)SendPlanLocked();  // a restarted daemon needs the plan again
    }
    STOKER_ASSIGN_OR_RETURN(net::Socket socket, Connection());
    net::PayloadWriter w;
    w.U8(static_cast<uint8_t>(TrainerRequest::kGet)).U64(id);
    STOKER_RETURN_IF_ERROR(SendMessage(socket, w.data(), -1, net::After(kRequestTimeout)));
    int passed = -1;
    STOKER_ASSIGN_OR_RETURN(auto reply,
                            ReceiveMessage(socket, &passed, net::After(kRequestTimeout)));
    FdCloser chunk_fd(passed);
    net::PayloadReader r(reply);
    STOKER_RETURN_IF_ERROR(DecodeStatus(r));
    auto size = r.U64();
    if (!size || !r.ExpectEnd().ok() || chunk_fd.get() < 0) {
      return Err(Status::Corruption("malformed GET reply from the node daemon"));
    }
    // Only a memfd sealed against resizing, of the announced layout, is trusted: a mapping of
    // it never faults, and the daemon marks what it verified before anyone reads it.
    const std::optional<ChunkFdLayout> layout = CheckChunkFd(chunk_fd.get(), *size);
    if (!layout) {
      return Err(Status::Corruption("the node daemon sent an unsealed or mis-sized chunk"));
    }
    const bool with_marks = *layout == ChunkFdLayout::kWithMarks;
    const uint64_t mapped = with_marks ? ChunkMemfdSize(*size) : *size;
    void* p = ::mmap(nullptr, mapped, PROT_READ, MAP_SHARED, chunk_fd.get(), 0);
    if (p == MAP_FAILED) return Err(Status::FromErrno(errno, "map chunk from the node daemon"));
    Return(std::move(socket));
    return std::make_shared<const Mapping>(static_cast<const std::byte*>(p), *size, mapped,
                                           with_marks, with_marks ? Watch() : nullptr);
  }

  // A connection to the daemon that carries no request, only watched: it hangs up when the
  // daemon dies (killed, crashed), which ends the waits on chunks it was filling at once. One
  // per daemon, shared by the mappings from it; nullptr when it cannot be opened (the waits
  // then end after kFillStall).
  std::shared_ptr<const net::Socket> Watch() {
    {
      std::lock_guard lock(mu_);
      if (watch_) return watch_;
    }
    auto socket = NewConnection();
    if (!socket) return nullptr;
    std::lock_guard lock(mu_);
    if (!watch_) watch_ = std::make_shared<const net::Socket>(*std::move(socket));
    return watch_;
  }

  // The plan goes over its own connection, kept open: the daemon drops a plan when the
  // connection that sent it closes (a trainer that died needs nothing any more).
  Status SendPlanLocked() {
    if (plan_.empty()) return Status::OK();
    if (!control_.valid()) {
      mu_.unlock();
      auto socket = NewConnection();
      mu_.lock();
      if (!socket) return socket.error();
      control_ = std::move(*socket);
    }
    for (size_t start = 0; start < plan_.size() || start == 0; start += kPlanIdsPerMessage) {
      const size_t n = std::min(kPlanIdsPerMessage, plan_.size() - start);
      net::PayloadWriter w;
      w.U8(static_cast<uint8_t>(TrainerRequest::kPlan)).U8(start == 0 ? 1 : 0);
      w.U32(static_cast<uint32_t>(n));
      for (size_t i = start; i < start + n; ++i) w.U64(plan_[i].first).U32(plan_[i].second);
      int passed = -1;
      Status st = SendMessage(control_, w.data(), -1, net::After(kRequestTimeout));
      Result<std::string> reply =
          st.ok() ? ReceiveMessage(control_, &passed, net::After(kRequestTimeout)) : Err(st);
      FdCloser unexpected(passed);
      if (!reply) {
        control_.Close();
        return reply.error();
      }
    }
    plan_sent_ = true;
    return Status::OK();
  }

  const std::shared_ptr<Storage> store_;
  const std::string path_;
  mutable std::mutex mu_;
  std::string manifest_;  // written once, before the first connection is used
  std::vector<net::Socket> idle_;
  std::list<std::pair<uint64_t, std::shared_ptr<const Mapping>>> kept_;
  net::Deadline retry_at_{};
  std::vector<std::pair<uint64_t, uint32_t>> plan_;  // (chunk id, in use until)
  bool plan_sent_ = true;
  net::Socket control_;
  std::shared_ptr<const net::Socket> watch_;
  NodeStorageStats stats_;
};

class NodeChunkFile : public RandomAccessFile {
 public:
  NodeChunkFile(std::shared_ptr<NodeLink> link, std::string path, uint64_t id, uint64_t size,
                std::unique_ptr<RandomAccessFile> store_file)
      : link_(std::move(link)),
        path_(std::move(path)),
        id_(id),
        size_(size),
        store_file_(std::move(store_file)) {}

  uint64_t Size() const override { return size_; }

  Status ReadAt(uint64_t offset, std::span<std::byte> dst) const override {
    if (offset > size_ || dst.size() > size_ - offset) {
      return Status::IOError(fmt::format("{}: read past the end", path_));
    }
    if (auto mapped = link_->Chunk(id_); mapped && (*mapped)->bytes().size() == size_) {
      if ((*mapped)->WaitFor(offset, dst.size()).ok()) {
        std::copy_n((*mapped)->bytes().begin() + static_cast<ptrdiff_t>(offset), dst.size(),
                    dst.begin());
        link_->Count(true);
        return Status::OK();
      }
      link_->Forget(id_);  // its fill failed or stalled: a later read asks the daemon again
    }
    link_->Count(false);
    STOKER_ASSIGN_OR_RETURN(RandomAccessFile * file, StoreFile());
    return file->ReadAt(offset, dst);
  }

 private:
  Result<RandomAccessFile*> StoreFile() const {
    std::lock_guard lock(mu_);
    if (store_file_ == nullptr) {
      STOKER_ASSIGN_OR_RETURN(store_file_, link_->store()->OpenRead(path_));
    }
    return store_file_.get();
  }

  const std::shared_ptr<NodeLink> link_;
  const std::string path_;
  const uint64_t id_;
  const uint64_t size_;
  mutable std::mutex mu_;
  mutable std::unique_ptr<RandomAccessFile> store_file_;
};

class NodeStorage : public storage::ForwardingStorage {
 public:
  NodeStorage(std::shared_ptr<Storage> store, std::string socket_path)
      : ForwardingStorage(store),  // the base is built first: a copy, then the link takes it
        link_(std::make_shared<NodeLink>(std::move(store), std::move(socket_path))) {}

  // Chunk files through the daemon; everything else goes to the store unchanged.
  Result<std::unique_ptr<RandomAccessFile>> OpenRead(std::string_view path) override {
    const auto id = format::ParseChunkPath(path);
    if (!id) return base()->OpenRead(path);
    if (auto mapped = link_->Chunk(*id); mapped) {
      return std::make_unique<NodeChunkFile>(link_, std::string(path), *id,
                                             (*mapped)->bytes().size(), nullptr);
    }
    STOKER_ASSIGN_OR_RETURN(auto file, base()->OpenRead(path));
    const uint64_t size = file->Size();
    return std::make_unique<NodeChunkFile>(link_, std::string(path), *id, size, std::move(file));
  }
  void AdviseReadOrder(std::span<const PlannedFile> plan) override {
    // Only chunk files; the entries keep their positions, so in_use_until still points right.
    std::vector<std::pair<uint64_t, uint32_t>> ids;
    ids.reserve(plan.size());
    for (const PlannedFile& f : plan) {
      auto id = format::ParseChunkPath(f.path);
      ids.emplace_back(id.value_or(~uint64_t{0}), f.in_use_until);
    }
    link_->SetPlan(std::move(ids));
  }

  NodeStorageStats stats() const { return link_->stats(); }

 private:
  const std::shared_ptr<NodeLink> link_;
};

}  // namespace

std::shared_ptr<Storage> NewNodeStorage(std::shared_ptr<Storage> store, std::string socket_path) {
  return std::make_shared<NodeStorage>(std::move(store), std::move(socket_path));
}

std::optional<NodeStorageStats> GetNodeStorageStats(const Storage& storage) {
  const auto* node = dynamic_cast<const NodeStorage*>(&storage);
  if (node == nullptr) return std::nullopt;
  return node->stats();
}

}  // namespace stoker::node
