#include "storage/memory_storage.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>

#include "storage/memory_paths.h"
#include "storage/shared_string_file.h"

namespace stoker::storage {

struct MemoryStorage::State {
  mutable std::mutex mu;
  // Each file's bytes are immutable once stored; writers build a new string and swap it in.
  std::map<std::string, std::shared_ptr<const std::string>, std::less<>> files;
  std::set<std::string, std::less<>> dirs{""};
};

namespace {

// Publishes its buffer to the store on every Append, so a test that "crashes" a writer sees
// exactly what POSIX would show: the bytes written so far.
class MemoryWritableFile final : public WritableFile {
 public:
  MemoryWritableFile(std::shared_ptr<MemoryStorage::State> state, std::string path)
      : state_(std::move(state)), path_(std::move(path)) {}
  Status Append(std::span<const std::byte> data) override {
    buffer_.append(reinterpret_cast<const char*>(data.data()), data.size());
    std::lock_guard lock(state_->mu);
    state_->files[path_] = std::make_shared<const std::string>(buffer_);
    return Status::OK();
  }
  Status Sync() override { return Status::OK(); }
  Status Close() override { return Status::OK(); }

 private:
  std::shared_ptr<MemoryStorage::State> state_;
  std::string path_;
  std::string buffer_;
};

}  // namespace

MemoryStorage::MemoryStorage() : state_(std::make_shared<State>()) {}
MemoryStorage::~MemoryStorage() = default;

Result<std::unique_ptr<RandomAccessFile>> MemoryStorage::OpenRead(std::string_view path) {
  std::lock_guard lock(state_->mu);
  auto it = state_->files.find(path);
  if (it == state_->files.end()) return Err(Status::NotFound("no such file: " + Describe(path)));
  return std::make_unique<SharedStringFile>(it->second, Describe(path));
}

Result<std::unique_ptr<WritableFile>> MemoryStorage::Create(std::string_view path) {
  std::lock_guard lock(state_->mu);
  if (!state_->dirs.contains(ParentOf(path))) {
    return Err(Status::NotFound("no such directory: " + Describe(ParentOf(path))));
  }
  state_->files[std::string(path)] = std::make_shared<const std::string>();
  return std::make_unique<MemoryWritableFile>(state_, std::string(path));
}

Result<std::shared_ptr<const FileBytes>> MemoryStorage::Map(std::string_view path) {
  std::lock_guard lock(state_->mu);
  auto it = state_->files.find(path);
  if (it == state_->files.end()) return Err(Status::NotFound("no such file: " + Describe(path)));
  return std::make_shared<SharedStringFile>(it->second, Describe(path));
}

Status MemoryStorage::Rename(std::string_view from, std::string_view to) {
  std::lock_guard lock(state_->mu);
  auto it = state_->files.find(from);
  if (it == state_->files.end()) return Status::NotFound("no such file: " + Describe(from));
  auto data = it->second;
  state_->files.erase(it);
  state_->files[std::string(to)] = std::move(data);
  return Status::OK();
}

Status MemoryStorage::CreateExclusive(std::string_view path, std::span<const std::byte> bytes) {
  std::lock_guard lock(state_->mu);
  if (!state_->dirs.contains(ParentOf(path))) {
    return Status::NotFound("no such directory: " + Describe(ParentOf(path)));
  }
  if (state_->files.contains(path))
    return Status::AlreadyExists(Describe(path) + " exists already");
  state_->files[std::string(path)] = std::make_shared<const std::string>(
      reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return Status::OK();
}

Status MemoryStorage::Remove(std::string_view path) {
  std::lock_guard lock(state_->mu);
  auto it = state_->files.find(path);
  if (it == state_->files.end()) return Status::NotFound("no such file: " + Describe(path));
  state_->files.erase(it);
  return Status::OK();
}

Status MemoryStorage::CreateDirs(std::string_view path) {
  std::lock_guard lock(state_->mu);
  std::string prefix(path);
  while (!prefix.empty()) {
    state_->dirs.insert(prefix);
    prefix = ParentOf(prefix);
  }
  return Status::OK();
}

Status MemoryStorage::SyncDir(std::string_view) { return Status::OK(); }

Result<std::vector<std::string>> MemoryStorage::List(std::string_view path) {
  std::lock_guard lock(state_->mu);
  if (!state_->dirs.contains(path)) {
    return Err(Status::NotFound("no such directory: " + Describe(path)));
  }
  return ChildrenOf(path, state_->files, state_->dirs);
}

Result<bool> MemoryStorage::Exists(std::string_view path) {
  std::lock_guard lock(state_->mu);
  return state_->files.contains(path) || state_->dirs.contains(path);
}

std::string MemoryStorage::Describe(std::string_view path) const {
  return "mem://" + std::string(path);
}

Result<std::string> MemoryStorage::GetContents(std::string_view path) const {
  std::lock_guard lock(state_->mu);
  auto it = state_->files.find(path);
  if (it == state_->files.end()) return Err(Status::NotFound("no such file: " + std::string(path)));
  return *it->second;
}

void MemoryStorage::SetContents(std::string_view path, std::string contents) {
  std::lock_guard lock(state_->mu);
  state_->files[std::string(path)] = std::make_shared<const std::string>(std::move(contents));
}

}  // namespace stoker::storage
