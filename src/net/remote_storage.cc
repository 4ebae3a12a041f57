#include "net/remote_storage.h"

#include <vector>

#include "net/auth.h"

namespace stoker::net {
namespace {

Status ReadOnly(std::string_view what, const std::string& where) {
  return Status::Unsupported(std::string(what) + " " + where +
                             ": stoker:// datasets are read-only; pack locally and serve");
}

class RemoteFile final : public RandomAccessFile {
 public:
  RemoteFile(std::shared_ptr<Client> client, std::string path, uint64_t size)
      : client_(std::move(client)), path_(std::move(path)), size_(size) {}
  uint64_t Size() const override { return size_; }
  Status ReadAt(uint64_t offset, std::span<std::byte> dst) const override {
    if (offset > size_ || dst.size() > size_ - offset) {
      return Status::IOError("read past the end of " + client_->Describe(path_) + " (" +
                             std::to_string(size_) + " bytes): offset " + std::to_string(offset) +
                             ", length " + std::to_string(dst.size()));
    }
    return client_->Read(path_, offset, dst);
  }

 private:
  const std::shared_ptr<Client> client_;
  const std::string path_;
  const uint64_t size_;
};

class HeapBytes final : public FileBytes {
 public:
  explicit HeapBytes(std::vector<std::byte> bytes) : bytes_(std::move(bytes)) {}
  std::span<const std::byte> bytes() const override { return bytes_; }

 private:
  const std::vector<std::byte> bytes_;
};

class RemoteStorage final : public Storage {
 public:
  explicit RemoteStorage(std::shared_ptr<Client> client) : client_(std::move(client)) {}

  Result<std::unique_ptr<RandomAccessFile>> OpenRead(std::string_view path) override {
    STOKER_ASSIGN_OR_RETURN(const uint64_t size, client_->Stat(path));
    return std::make_unique<RemoteFile>(client_, std::string(path), size);
  }

  Result<std::shared_ptr<const FileBytes>> Map(std::string_view path) override {
    STOKER_ASSIGN_OR_RETURN(const uint64_t size, client_->Stat(path));
    std::vector<std::byte> bytes(size);
    STOKER_RETURN_IF_ERROR(client_->Read(path, 0, bytes));
    return std::make_shared<HeapBytes>(std::move(bytes));
  }

  Result<std::unique_ptr<WritableFile>> Create(std::string_view path) override {
    return Err(ReadOnly("create", Describe(path)));
  }
  Status Rename(std::string_view from, std::string_view) override {
    return ReadOnly("rename", Describe(from));
  }
  Status CreateExclusive(std::string_view path, std::span<const std::byte>) override {
    return ReadOnly("create", Describe(path));
  }
  Status Remove(std::string_view path) override { return ReadOnly("remove", Describe(path)); }
  Status CreateDirs(std::string_view path) override { return ReadOnly("mkdir", Describe(path)); }
  Status SyncDir(std::string_view path) override { return ReadOnly("sync", Describe(path)); }

  Result<std::vector<std::string>> List(std::string_view path) override {
    return client_->List(path);
  }

  Result<bool> Exists(std::string_view path) override {
    if (path.empty()) return true;
    auto size = client_->Stat(path);
    if (size) return true;
    if (size.error().IsNotFound()) return false;
    return Err(size.error());
  }

  std::string Describe(std::string_view path) const override { return client_->Describe(path); }

 private:
  const std::shared_ptr<Client> client_;
};

}  // namespace

std::shared_ptr<Storage> NewRemoteStorage(std::shared_ptr<Client> client) {
  return std::make_shared<RemoteStorage>(std::move(client));
}

Result<std::shared_ptr<Storage>> OpenRemoteStorage(std::string_view uri, std::string secret,
                                                   const ClientOptions& options) {
  STOKER_ASSIGN_OR_RETURN(StokerUri parsed, ParseStokerUri(uri));
  STOKER_ASSIGN_OR_RETURN(auto client, Client::Create(std::move(parsed), std::move(secret), options));
  return NewRemoteStorage(std::move(client));
}

Result<std::shared_ptr<Storage>> OpenRemoteStorage(std::string_view uri) {
  STOKER_ASSIGN_OR_RETURN(StokerUri parsed, ParseStokerUri(uri));  // bad URIs first
  auto secret = LoadSecretFromEnvironment();
  if (!secret) return Err(secret.error().WithContext("cannot open " + parsed.ToString()));
  STOKER_ASSIGN_OR_RETURN(auto client, Client::Create(std::move(parsed), std::move(*secret)));
  return NewRemoteStorage(std::move(client));
}

}  // namespace stoker::net
