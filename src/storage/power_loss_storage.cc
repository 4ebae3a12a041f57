#include "storage/power_loss_storage.h"

#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "storage/memory_paths.h"
#include "storage/shared_string_file.h"

namespace stoker::storage {

struct PowerLossStorage::State {
  // A file, under whatever names point at it: its bytes now and as of its last Sync.
  struct Inode {
    std::shared_ptr<const std::string> data = std::make_shared<const std::string>();
    std::shared_ptr<const std::string> synced = std::make_shared<const std::string>();
  };

  mutable std::mutex mu;
  std::map<uint64_t, Inode> inodes;
  uint64_t next_inode = 1;
  std::map<std::string, uint64_t, std::less<>> live;     // names as readers see them now
  std::map<std::string, uint64_t, std::less<>> durable;  // names as of their directory's sync
  std::set<std::string, std::less<>> dirs{""};
  uint64_t mutations = 0;
  std::optional<uint64_t> crash_at;  // mutations allowed before the power goes

  // OK if the call may run (counting it if it mutates); IOError once the power is gone.
  Status Gate(bool mutates) {
    if (crash_at && mutations >= *crash_at) return Status::IOError("power lost (a crash test)");
    if (mutates) ++mutations;
    return Status::OK();
  }
};

namespace {

class PowerLossWritableFile final : public WritableFile {
 public:
  PowerLossWritableFile(std::shared_ptr<PowerLossStorage::State> state, uint64_t inode)
      : state_(std::move(state)), inode_(inode) {}
  Status Append(std::span<const std::byte> data) override {
    std::lock_guard lock(state_->mu);
    STOKER_RETURN_IF_ERROR(state_->Gate(true));
    auto& node = state_->inodes[inode_];
    auto grown = std::make_shared<std::string>(*node.data);
    grown->append(reinterpret_cast<const char*>(data.data()), data.size());
    node.data = std::move(grown);
    return Status::OK();
  }
  Status Sync() override {
    std::lock_guard lock(state_->mu);
    STOKER_RETURN_IF_ERROR(state_->Gate(true));
    auto& node = state_->inodes[inode_];
    node.synced = node.data;
    return Status::OK();
  }
  Status Close() override {
    std::lock_guard lock(state_->mu);
    return state_->Gate(true);
  }

 private:
  std::shared_ptr<PowerLossStorage::State> state_;
  uint64_t inode_;
};

}  // namespace

PowerLossStorage::PowerLossStorage() : state_(std::make_shared<State>()) {}
PowerLossStorage::~PowerLossStorage() = default;

Result<std::unique_ptr<RandomAccessFile>> PowerLossStorage::OpenRead(std::string_view path) {
  std::lock_guard lock(state_->mu);
  STOKER_RETURN_IF_ERROR(state_->Gate(false));
  auto it = state_->live.find(path);
  if (it == state_->live.end()) return Err(Status::NotFound("no such file: " + Describe(path)));
  return std::make_unique<SharedStringFile>(state_->inodes[it->second].data, Describe(path));
}

Result<std::shared_ptr<const FileBytes>> PowerLossStorage::Map(std::string_view path) {
  std::lock_guard lock(state_->mu);
  STOKER_RETURN_IF_ERROR(state_->Gate(false));
  auto it = state_->live.find(path);
  if (it == state_->live.end()) return Err(Status::NotFound("no such file: " + Describe(path)));
  return std::make_shared<SharedStringFile>(state_->inodes[it->second].data, Describe(path));
}

Result<std::unique_ptr<WritableFile>> PowerLossStorage::Create(std::string_view path) {
  std::lock_guard lock(state_->mu);
  STOKER_RETURN_IF_ERROR(state_->Gate(true));
  if (!state_->dirs.contains(ParentOf(path))) {
    return Err(Status::NotFound("no such directory: " + Describe(ParentOf(path))));
  }
  uint64_t inode;
  if (auto it = state_->live.find(path); it != state_->live.end()) {
    inode = it->second;  // O_TRUNC: the same file, emptied; its synced bytes stay until a Sync
    state_->inodes[inode].data = std::make_shared<const std::string>();
  } else {
    inode = state_->next_inode++;
    state_->inodes[inode] = {};
    state_->live[std::string(path)] = inode;
  }
  return std::make_unique<PowerLossWritableFile>(state_, inode);
}

Status PowerLossStorage::Rename(std::string_view from, std::string_view to) {
  std::lock_guard lock(state_->mu);
  STOKER_RETURN_IF_ERROR(state_->Gate(true));
  auto it = state_->live.find(from);
  if (it == state_->live.end()) return Status::NotFound("no such file: " + Describe(from));
  const uint64_t inode = it->second;
  state_->live.erase(it);
  state_->live[std::string(to)] = inode;
  return Status::OK();
}

Status PowerLossStorage::CreateExclusive(std::string_view path, std::span<const std::byte> bytes) {
  std::lock_guard lock(state_->mu);
  STOKER_RETURN_IF_ERROR(state_->Gate(true));
  if (!state_->dirs.contains(ParentOf(path))) {
    return Status::NotFound("no such directory: " + Describe(ParentOf(path)));
  }
  if (state_->live.contains(path)) return Status::AlreadyExists(Describe(path) + " exists already");
  const uint64_t inode = state_->next_inode++;
  auto data = std::make_shared<const std::string>(reinterpret_cast<const char*>(bytes.data()),
                                                  bytes.size());
  state_->inodes[inode] = {data, data};  // durably: its bytes and its name
  state_->live[std::string(path)] = inode;
  state_->durable[std::string(path)] = inode;
  return Status::OK();
}

Status PowerLossStorage::Remove(std::string_view path) {
  std::lock_guard lock(state_->mu);
  STOKER_RETURN_IF_ERROR(state_->Gate(true));
  auto it = state_->live.find(path);
  if (it == state_->live.end()) return Status::NotFound("no such file: " + Describe(path));
  state_->live.erase(it);
  return Status::OK();
}

Status PowerLossStorage::CreateDirs(std::string_view path) {
  std::lock_guard lock(state_->mu);
  STOKER_RETURN_IF_ERROR(state_->Gate(true));
  for (std::string prefix(path); !prefix.empty(); prefix = ParentOf(prefix)) {
    state_->dirs.insert(prefix);
  }
  return Status::OK();
}

Status PowerLossStorage::SyncDir(std::string_view path) {
  std::lock_guard lock(state_->mu);
  STOKER_RETURN_IF_ERROR(state_->Gate(true));
  // The directory's entries become what they are now: names removed or renamed away go, names
  // created or renamed here stay.
  std::erase_if(state_->durable, [&](const auto& entry) { return ParentOf(entry.first) == path; });
  for (const auto& [name, inode] : state_->live) {
    if (ParentOf(name) == path) state_->durable[name] = inode;
  }
  return Status::OK();
}

Result<std::vector<std::string>> PowerLossStorage::List(std::string_view path) {
  std::lock_guard lock(state_->mu);
  STOKER_RETURN_IF_ERROR(state_->Gate(false));
  if (!state_->dirs.contains(path)) {
    return Err(Status::NotFound("no such directory: " + Describe(path)));
  }
  return ChildrenOf(path, state_->live, state_->dirs);
}

Result<bool> PowerLossStorage::Exists(std::string_view path) {
  std::lock_guard lock(state_->mu);
  STOKER_RETURN_IF_ERROR(state_->Gate(false));
  return state_->live.contains(path) || state_->dirs.contains(path);
}

std::string PowerLossStorage::Describe(std::string_view path) const {
  return "powerloss://" + std::string(path);
}

uint64_t PowerLossStorage::mutations() const {
  std::lock_guard lock(state_->mu);
  return state_->mutations;
}

void PowerLossStorage::CrashAfter(uint64_t n) {
  std::lock_guard lock(state_->mu);
  state_->crash_at = state_->mutations + n;
}

void PowerLossStorage::PowerLoss(const std::function<bool(std::string_view dir)>& flushed) {
  std::lock_guard lock(state_->mu);
  if (flushed) {
    std::erase_if(state_->durable,
                  [&](const auto& entry) { return flushed(ParentOf(entry.first)); });
    for (const auto& [name, inode] : state_->live) {
      if (flushed(ParentOf(name))) state_->durable[name] = inode;
    }
  }
  state_->live = state_->durable;
  for (auto& [id, node] : state_->inodes) node.data = node.synced;
  state_->crash_at.reset();
}

}  // namespace stoker::storage
