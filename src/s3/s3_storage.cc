#include "s3/s3_storage.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "common/retry.h"
#include "storage/string_bytes.h"

namespace stoker::s3 {
namespace {

class S3File : public RandomAccessFile {
 public:
  S3File(std::shared_ptr<S3Client> client, std::string bucket, std::string key, uint64_t size)
      : client_(std::move(client)), bucket_(std::move(bucket)), key_(std::move(key)), size_(size) {}
  uint64_t Size() const override { return size_; }
  Status ReadAt(uint64_t offset, std::span<std::byte> dst) const override {
    if (offset > size_ || dst.size() > size_ - offset) {
      return Status::IOError(fmt::format("s3://{}/{}: read of {} bytes at {} past the end ({})",
                                         bucket_, key_, dst.size(), offset, size_));
    }
    return client_->GetRange(bucket_, key_, offset, dst);
  }

 private:
  std::shared_ptr<S3Client> client_;
  std::string bucket_, key_;
  uint64_t size_;
};

class S3WritableFile : public WritableFile {
 public:
  S3WritableFile(std::shared_ptr<S3Client> client, std::string bucket, std::string key)
      : client_(std::move(client)), bucket_(std::move(bucket)), key_(std::move(key)) {}
  ~S3WritableFile() override {
    // Never completed: the parts uploaded so far are thrown away, nothing becomes visible.
    if (!upload_id_.empty() && !closed_) {
      (void)client_->AbortMultipartUpload(bucket_, key_, upload_id_);
    }
  }

  Status Append(std::span<const std::byte> data) override {
    if (closed_) return Status::InvalidArgument(Name() + ": append after close");
    // Grow to at most two parts (plus what one append brings), not by doubling past them:
    // `pack` keeps many writers open at once and budgets 2 parts each (WriteBufferBytes).
    if (buffer_.size() + data.size() > buffer_.capacity()) {
      buffer_.reserve(std::max(buffer_.size() + data.size(),
                               std::min<size_t>(2 * buffer_.capacity(), 2 * kPartBytes)));
    }
    buffer_.insert(buffer_.end(), data.begin(), data.end());
    while (buffer_.size() >= 2 * kPartBytes) {  // keep the last part for Close
      STOKER_RETURN_IF_ERROR(UploadPart(std::span(buffer_).first(kPartBytes)));
      buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<ptrdiff_t>(kPartBytes));
    }
    return Status::OK();
  }
  Status Sync() override { return Status::OK(); }  // durable once Close succeeds
  Status Close() override {
    if (closed_) return Status::OK();
    if (upload_id_.empty()) {
      STOKER_RETURN_IF_ERROR(client_->PutObject(bucket_, key_, buffer_));
    } else {
      if (!buffer_.empty()) STOKER_RETURN_IF_ERROR(UploadPart(buffer_));
      STOKER_RETURN_IF_ERROR(client_->CompleteMultipartUpload(bucket_, key_, upload_id_, etags_));
    }
    closed_ = true;
    buffer_.clear();
    buffer_.shrink_to_fit();
    return Status::OK();
  }

 private:
  std::string Name() const { return fmt::format("s3://{}/{}", bucket_, key_); }
  Status UploadPart(std::span<const std::byte> part) {
    if (upload_id_.empty()) {
      STOKER_ASSIGN_OR_RETURN(upload_id_, client_->CreateMultipartUpload(bucket_, key_));
    }
    STOKER_ASSIGN_OR_RETURN(
        std::string etag,
        client_->UploadPart(bucket_, key_, upload_id_, static_cast<int>(etags_.size() + 1), part));
    etags_.push_back(std::move(etag));
    return Status::OK();
  }

  std::shared_ptr<S3Client> client_;
  std::string bucket_, key_;
  std::vector<std::byte> buffer_;
  std::string upload_id_;
  std::vector<std::string> etags_;
  bool closed_ = false;
};

class S3Storage : public Storage {
 public:
  S3Storage(std::shared_ptr<S3Client> client, S3Location location)
      : client_(std::move(client)), loc_(std::move(location)) {}

  Result<std::unique_ptr<RandomAccessFile>> OpenRead(std::string_view path) override {
    const std::string key = Key(path);
    auto size = client_->HeadObject(loc_.bucket, key);
    if (!size) return Err(Named(size.error(), path));
    return std::make_unique<S3File>(client_, loc_.bucket, key, *size);
  }
  Result<std::unique_ptr<WritableFile>> Create(std::string_view path) override {
    return std::make_unique<S3WritableFile>(client_, loc_.bucket, Key(path));
  }
  Result<std::shared_ptr<const FileBytes>> Map(std::string_view path) override {
    auto bytes = client_->GetObject(loc_.bucket, Key(path));
    if (!bytes) return Err(Named(bytes.error(), path));
    return std::make_shared<storage::StringBytes>(std::move(*bytes));
  }
  Status Rename(std::string_view from, std::string_view to) override {
    STOKER_RETURN_IF_ERROR(client_->CopyObject(loc_.bucket, Key(from), Key(to)));
    return client_->DeleteObject(loc_.bucket, Key(from));
  }
  Status CreateExclusive(std::string_view path, std::span<const std::byte> bytes) override {
    return client_->PutObject(loc_.bucket, Key(path), bytes, /*if_absent=*/true);
  }
  Status Remove(std::string_view path) override {
    return client_->DeleteObject(loc_.bucket, Key(path));
  }
  Status CreateDirs(std::string_view) override { return Status::OK(); }
  Status SyncDir(std::string_view) override { return Status::OK(); }
  Result<std::vector<std::string>> List(std::string_view path) override {
    std::string prefix = Key(path);
    if (!prefix.empty()) prefix += "/";
    STOKER_ASSIGN_OR_RETURN(ObjectListing listing, client_->List(loc_.bucket, prefix, "/"));
    std::set<std::string> names;
    for (const std::string& key : listing.keys) names.insert(key.substr(prefix.size()));
    for (const std::string& p : listing.prefixes) {
      names.insert(p.substr(prefix.size(), p.size() - prefix.size() - 1));
    }
    names.erase("");
    if (names.empty()) return Err(Status::NotFound(Describe(path) + ": no such directory"));
    return std::vector<std::string>(names.begin(), names.end());
  }
  Result<bool> Exists(std::string_view path) override {
    auto size = client_->HeadObject(loc_.bucket, Key(path));
    if (size) return true;
    if (!size.error().IsNotFound()) return Err(size.error());
    // Maybe a "directory": any key below it.
    STOKER_ASSIGN_OR_RETURN(ObjectListing listing,
                            client_->List(loc_.bucket, Key(path) + "/", "/", 1));
    return !listing.keys.empty() || !listing.prefixes.empty();
  }
  std::string Describe(std::string_view path) const override {
    return fmt::format("s3://{}/{}", loc_.bucket, Key(path));
  }
  uint64_t WriteBufferBytes() const override { return 2 * kPartBytes; }  // see S3WritableFile

 private:
  std::string Key(std::string_view path) const {
    if (loc_.prefix.empty()) return std::string(path);
    if (path.empty()) return loc_.prefix;
    return loc_.prefix + "/" + std::string(path);
  }
  Status Named(const Status& st, std::string_view path) const {
    return st.IsNotFound() ? Status::NotFound(Describe(path) + ": no such object") : st;
  }

  std::shared_ptr<S3Client> client_;
  S3Location loc_;
};

}  // namespace

std::shared_ptr<Storage> NewS3Storage(std::shared_ptr<S3Client> client, S3Location location) {
  return std::make_shared<S3Storage>(std::move(client), std::move(location));
}

Result<std::shared_ptr<Storage>> OpenS3Storage(std::string_view uri,
                                               const StorageOptions& options) {
  STOKER_ASSIGN_OR_RETURN(S3Location location, ParseS3Uri(uri));
  // The options stand in for the AWS settings they name, so one set of rules reads both.
  std::map<std::string, std::string> overrides;
  if (options.s3_keys) {
    overrides["AWS_ACCESS_KEY_ID"] = options.s3_keys->access_key_id;
    overrides["AWS_SECRET_ACCESS_KEY"] = options.s3_keys->secret_access_key;
    overrides["AWS_SESSION_TOKEN"] = options.s3_keys->session_token;
  }
  if (options.s3_endpoint) {
    overrides["AWS_ENDPOINT_URL_S3"] = *options.s3_endpoint;
  }
  if (options.s3_region) {
    overrides["AWS_REGION"] = *options.s3_region;
  }
  STOKER_ASSIGN_OR_RETURN(S3Config config, LoadS3ConfigFromEnvironment(overrides));
  STOKER_ASSIGN_OR_RETURN(config.request_timeout, RequestTimeout(options.request_timeout));
  STOKER_ASSIGN_OR_RETURN(auto client, S3Client::Create(std::move(config)));
  return NewS3Storage(std::move(client), std::move(location));
}

}  // namespace stoker::s3
