#include "common/spool.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <utility>

#include "common/varint.h"

namespace stoker {

std::string DefaultSpoolDir() {
  const char* dir = std::getenv("TMPDIR");
  return dir != nullptr && *dir != '\0' ? dir : "/tmp";
}

Result<Spool> Spool::Create(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
    // No O_TMPFILE on this file system: a named file, unlinked before anything is written.
    std::string name = dir + "/stoker-spool-XXXXXX";
    fd = ::mkostemp(name.data(), O_CLOEXEC);
    if (fd >= 0) ::unlink(name.c_str());
  }
  if (fd < 0) return Err(Status::FromErrno(errno, "create a temporary file in " + dir));
  return Spool(fd);
}

Spool::Spool(Spool&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      size_(other.size_),
      written_(other.written_),
      buffer_(std::move(other.buffer_)) {}

Spool& Spool::operator=(Spool&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
    written_ = other.written_;
    buffer_ = std::move(other.buffer_);
  }
  return *this;
}

Spool::~Spool() {
  if (fd_ >= 0) ::close(fd_);
}

Status Spool::Append(std::string_view bytes) {
  buffer_.append(bytes);
  size_ += bytes.size();
  return buffer_.size() >= kBufferBytes ? Flush() : Status::OK();
}

Status Spool::AppendRecord(std::string_view record) {
  std::string size;
  varint::Put(&size, record.size());
  STOKER_RETURN_IF_ERROR(Append(size));
  return Append(record);
}

Status Spool::Flush() {
  size_t done = 0;
  while (done < buffer_.size()) {
    const ssize_t n = ::pwrite(fd_, buffer_.data() + done, buffer_.size() - done,
                               static_cast<off_t>(written_ + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "write a temporary file");
    }
    done += static_cast<size_t>(n);
  }
  written_ += done;
  buffer_.clear();
  return Status::OK();
}

Status Spool::Seal() {
  STOKER_RETURN_IF_ERROR(Flush());
  std::string().swap(buffer_);
  return Status::OK();
}

Status Spool::Read(uint64_t offset, uint64_t n, std::string* out) const {
  if (offset + n > written_) n = offset < written_ ? written_ - offset : 0;
  out->resize(n);
  return ReadInto(offset, out->data(), n);
}

Status Spool::ReadInto(uint64_t offset, char* dst, uint64_t n) const {
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd_, dst + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(errno, "read a temporary file");
    }
    if (got == 0) return Status::IOError("a temporary file ended early");
    done += static_cast<size_t>(got);
  }
  return Status::OK();
}

Result<std::string_view> Spool::Reader::Peek(uint64_t n) {
  if (pos_ + n > buffer_.size() && offset_ + buffer_.size() < spool_.written_) {
    // Refill in place: keep the unread tail, read after it up to the buffer's size (or `n`),
    // so a reader holds one buffer's worth, however long it runs.
    offset_ += pos_;
    buffer_.erase(0, pos_);
    pos_ = 0;
    const uint64_t keep = buffer_.size();
    const uint64_t end = std::min(offset_ + std::max(buffer_bytes_, n), spool_.written_);
    buffer_.resize(end - offset_);
    STOKER_RETURN_IF_ERROR(
        spool_.ReadInto(offset_ + keep, buffer_.data() + keep, end - offset_ - keep));
  }
  const std::string_view rest =
      std::string_view(buffer_).substr(std::min<uint64_t>(pos_, buffer_.size()));
  return rest.substr(0, std::min<uint64_t>(n, rest.size()));
}

Result<std::optional<std::string_view>> Spool::Reader::NextRecord() {
  if (at_end()) return std::optional<std::string_view>();
  STOKER_ASSIGN_OR_RETURN(std::string_view head, Peek(varint::kMaxBytes));
  std::string_view rest = head;
  const auto size = varint::Get(&rest);
  if (!size) return Err(Status::Internal("a spooled record is damaged"));
  Skip(head.size() - rest.size());
  STOKER_ASSIGN_OR_RETURN(std::string_view bytes, Peek(*size));
  if (bytes.size() != *size) return Err(Status::Internal("a spooled record ends early"));
  Skip(*size);
  return std::optional<std::string_view>(bytes);
}

}  // namespace stoker
