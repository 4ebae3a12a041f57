#include "net/remote_storage.h"

#include <cstdlib>
#include <vector>

#include <fmt/format.h>

#include "common/retry.h"
#include "common/unique_id.h"
#include "net/auth.h"

namespace stoker::net {
namespace {

// A file written over the wire: bytes collect in a buffer of kMaxWriteLength and go out as
// WRITE requests into an upload; Close() FINISHes it, so the file appears whole or not at all.
// Dropped without Close(), the upload is aborted (best effort; gc removes what a dead writer
// leaves).
class RemoteWritableFile final : public WritableFile {
 public:
  RemoteWritableFile(std::shared_ptr<Client> client, std::string path)
      : client_(std::move(client)), path_(std::move(path)), upload_(UniqueId()) {}
  ~RemoteWritableFile() override {
    if (!closed_) (void)client_->Finish(path_, upload_, 0, FinishMode::kAbort);
  }
  Status Append(std::span<const std::byte> data) override {
    while (!data.empty()) {
      const size_t n = std::min(data.size(), kMaxWriteLength - buffer_.size());
      buffer_.insert(buffer_.end(), data.begin(), data.begin() + static_cast<std::ptrdiff_t>(n));
      data = data.subspan(n);
      if (buffer_.size() == kMaxWriteLength) STOKER_RETURN_IF_ERROR(Send());
    }
    return Status::OK();
  }
  // The server fsyncs at FINISH; before that the bytes are only the server's to lose.
  Status Sync() override { return Send(); }
  Status Close() override {
    STOKER_RETURN_IF_ERROR(Send());
    STOKER_RETURN_IF_ERROR(client_->Finish(path_, upload_, size_, FinishMode::kReplace));
    closed_ = true;
    return Status::OK();
  }

 private:
  Status Send() {
    if (buffer_.empty()) return Status::OK();
    STOKER_RETURN_IF_ERROR(client_->Write(path_, upload_, size_, buffer_));
    size_ += buffer_.size();
    buffer_.clear();
    return Status::OK();
  }
  const std::shared_ptr<Client> client_;
  const std::string path_;
  const uint64_t upload_;
  std::vector<std::byte> buffer_;
  uint64_t size_ = 0;  // sent so far
  bool closed_ = false;
};

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
    // Grown as the bytes arrive, not allocated from the size the server states.
    constexpr uint64_t kPiece = 16 << 20;
    std::vector<std::byte> bytes;
    for (uint64_t done = 0; done < size;) {
      const uint64_t n = std::min(kPiece, size - done);
      bytes.resize(static_cast<size_t>(done + n));
      STOKER_RETURN_IF_ERROR(client_->Read(path, done, std::span(bytes).subspan(done)));
      done += n;
    }
    return std::make_shared<HeapBytes>(std::move(bytes));
  }

  // Writes need a server started with --writable (PermissionDenied otherwise).
  Result<std::unique_ptr<WritableFile>> Create(std::string_view path) override {
    return std::make_unique<RemoteWritableFile>(client_, std::string(path));
  }
  Status Rename(std::string_view from, std::string_view to) override {
    return client_->Rename(from, to);
  }
  Status CreateExclusive(std::string_view path, std::span<const std::byte> bytes) override {
    const uint64_t upload = UniqueId();
    if (!bytes.empty()) {
      if (Status st = client_->Write(path, upload, 0, bytes); !st.ok()) {
        (void)client_->Finish(path, upload, 0, FinishMode::kAbort);
        return st;
      }
    }
    return client_->Finish(path, upload, bytes.size(), FinishMode::kExclusive);
  }
  Status Remove(std::string_view path) override { return client_->Remove(path); }
  // The server creates directories as files are written and fsyncs them as files are finished.
  Status CreateDirs(std::string_view) override { return Status::OK(); }
  Status SyncDir(std::string_view) override { return Status::OK(); }
  uint64_t WriteBufferBytes() const override { return kMaxWriteLength; }

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
  STOKER_ASSIGN_OR_RETURN(auto client,
                          Client::Create(std::move(parsed), std::move(secret), options));
  return NewRemoteStorage(std::move(client));
}

Result<std::shared_ptr<Storage>> OpenRemoteStorage(std::string_view uri,
                                                   const StorageOptions& options) {
  STOKER_ASSIGN_OR_RETURN(StokerUri parsed, ParseStokerUri(uri));  // bad URIs first
  std::string secret;
  if (options.secret) {
    secret = *options.secret;
  } else {
    auto loaded = LoadSecretFromEnvironment();
    if (!loaded) return Err(loaded.error().WithContext("cannot open " + parsed.ToString()));
    secret = std::move(*loaded);
  }
  ClientOptions client_options;
  STOKER_ASSIGN_OR_RETURN(client_options.request_timeout, RequestTimeout(options.request_timeout));
  STOKER_ASSIGN_OR_RETURN(client_options.reconnect_timeout, ReconnectTimeout());
  STOKER_ASSIGN_OR_RETURN(auto client,
                          Client::Create(std::move(parsed), std::move(secret), client_options));
  return NewRemoteStorage(std::move(client));
}

}  // namespace stoker::net
