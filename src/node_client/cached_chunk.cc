#include "node_client/cached_chunk.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

namespace stoker::node {
namespace {

constexpr int kChunkSeals = F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

// mmap of 0 bytes is an error; an empty chunk is not a chunk, but keep the class total.
std::byte* MapFd(int fd, uint64_t size, int prot) {
  if (size == 0) return nullptr;
  void* p = ::mmap(nullptr, size, prot, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<std::byte*>(p);
}

}  // namespace

CachedChunk::CachedChunk(int fd, uint64_t size, std::byte* data, std::atomic<uint64_t>* live_bytes)
    : fd_(fd), size_(size), data_(data), live_bytes_(live_bytes) {
  if (live_bytes_ != nullptr) live_bytes_->fetch_add(size_);
}

CachedChunk::~CachedChunk() {
  if (data_ != nullptr) ::munmap(data_, size_);
  ::close(fd_);
  if (live_bytes_ != nullptr) live_bytes_->fetch_sub(size_);
}

Result<std::unique_ptr<CachedChunk>> CachedChunk::Create(const std::string& name, uint64_t size,
                                                         std::atomic<uint64_t>* live_bytes) {
  const int fd = ::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Err(Status::FromErrno(errno, "memfd_create " + name));
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    const int e = errno;
    ::close(fd);
    return Err(Status::FromErrno(e, "size memfd " + name));
  }
  std::byte* data = MapFd(fd, size, PROT_READ | PROT_WRITE);
  if (data == nullptr && size > 0) {
    const int e = errno;
    ::close(fd);
    return Err(Status::FromErrno(e, "map memfd " + name));
  }
  return std::unique_ptr<CachedChunk>(new CachedChunk(fd, size, data, live_bytes));
}

std::span<std::byte> CachedChunk::writable() {
  return sealed_ ? std::span<std::byte>() : std::span<std::byte>(data_, size_);
}

Status CachedChunk::Seal() {
  if (sealed_) return Status::OK();
  // F_SEAL_WRITE is refused while a writable shared mapping exists, so drop ours first.
  if (data_ != nullptr) ::munmap(data_, size_);
  data_ = nullptr;
  if (::fcntl(fd_, F_ADD_SEALS, kChunkSeals) != 0) return Status::FromErrno(errno, "seal memfd");
  data_ = MapFd(fd_, size_, PROT_READ);
  if (data_ == nullptr && size_ > 0) return Status::FromErrno(errno, "map sealed memfd");
  sealed_ = true;
  return Status::OK();
}

bool IsSealedChunk(int fd) {
  const int seals = ::fcntl(fd, F_GET_SEALS);
  return seals >= 0 && (seals & kChunkSeals) == kChunkSeals;
}

}  // namespace stoker::node
