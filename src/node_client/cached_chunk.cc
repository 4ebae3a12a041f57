#include "node_client/cached_chunk.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <ctime>

#include <fmt/format.h>

namespace stoker::node {
namespace {

constexpr int kSizeSeals = F_SEAL_SHRINK | F_SEAL_GROW;  // from the start: mappings never fault
// Once the fill is done: no writable mapping exists (ours is gone) and none can be made.
// (F_SEAL_WRITE itself is refused while readers hold shared mappings, even read-only ones.)
constexpr int kFinalSeals = F_SEAL_FUTURE_WRITE | F_SEAL_SEAL;
// What a daemon from before cut-through sealed a whole chunk with.
constexpr int kSealedWhole = F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
constexpr uint64_t kTrailerBytes = 64;

std::byte* MapFd(int fd, uint64_t size, int prot) {
  void* p = ::mmap(nullptr, size, prot, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<std::byte*>(p);
}

// The trailer: u64 verified prefix | u64 verified tail's start | u32 change count, the word
// waiters sleep on (a futex: shared, so it works across processes mapping the memfd).
constexpr uint64_t kTailMark = 8, kChangeCount = 16;

uint64_t Load(const std::byte* p) {
  return __atomic_load_n(reinterpret_cast<const uint64_t*>(p), __ATOMIC_ACQUIRE);
}

uint32_t* ChangeCount(const std::byte* trailer) {
  return reinterpret_cast<uint32_t*>(const_cast<std::byte*>(trailer + kChangeCount));
}

// After a mark moved: count the change and wake every waiter.
void Announce(std::byte* trailer) {
  uint32_t* word = ChangeCount(trailer);
  __atomic_fetch_add(word, 1, __ATOMIC_RELEASE);
  ::syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// Sleeps until the change count moves from `seen`, or `limit` passes.
void AwaitChange(const std::byte* trailer, uint32_t seen, std::chrono::milliseconds limit) {
  const timespec timeout{static_cast<time_t>(limit.count() / 1000),
                         static_cast<long>(limit.count() % 1000) * 1000000};
  ::syscall(SYS_futex, ChangeCount(trailer), FUTEX_WAIT, seen, &timeout, nullptr, 0);
}

// Whether the process at the other end of `socket` has gone (its end closed: killed, crashed).
// Only a hang-up counts; data waiting to be read (a reply on a pooled connection) does not.
bool FillerGone(int socket) {
  if (socket < 0) return false;
  pollfd p{socket, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace

uint64_t VerifiedMarkOffset(uint64_t size) { return (size + 63) / 64 * 64; }
uint64_t ChunkMemfdSize(uint64_t size) { return VerifiedMarkOffset(size) + kTrailerBytes; }

Status WaitForVerified(const std::byte* trailer, uint64_t size, uint64_t offset, uint64_t n,
                       std::chrono::milliseconds stall, int filler) {
  const uint64_t end = offset + n;
  uint64_t last = 0;
  auto last_progress = std::chrono::steady_clock::now();
  for (;;) {
    // The change count first: a mark that moves after it was read wakes the wait below.
    const uint32_t seen = __atomic_load_n(ChangeCount(trailer), __ATOMIC_ACQUIRE);
    const uint64_t verified = Load(trailer);
    if (verified == kFillFailed) {
      return Status::Unavailable("the node daemon could not fill this chunk");
    }
    if (end <= verified || (offset >= Load(trailer + kTailMark) && end <= size)) {
      return Status::OK();
    }
    const auto now = std::chrono::steady_clock::now();
    if (verified != last) {
      last = verified;
      last_progress = now;
    } else if (now - last_progress > stall) {
      return Status::Unavailable(
          fmt::format("the node daemon's fill of this chunk made no progress for {} ms "
                      "(at {} of {} bytes)",
                      stall.count(), verified, size));
    } else if (FillerGone(filler)) {
      return Status::Unavailable(fmt::format(
          "the node daemon is gone (its connection closed) at {} of {} bytes", verified, size));
    }
    // Woken by the filler; the limit bounds a wait on a filler that died without a word.
    AwaitChange(trailer, seen, std::chrono::milliseconds(100));
  }
}

CachedChunk::CachedChunk(int fd, uint64_t size, std::byte* wdata, std::byte* rdata,
                         std::atomic<uint64_t>* live_bytes)
    : fd_(fd), size_(size), wdata_(wdata), rdata_(rdata), live_bytes_(live_bytes) {
  if (live_bytes_ != nullptr) live_bytes_->fetch_add(size_);
}

CachedChunk::~CachedChunk() {
  if (wdata_ != nullptr) ::munmap(wdata_, ChunkMemfdSize(size_));
  if (rdata_ != nullptr) ::munmap(rdata_, ChunkMemfdSize(size_));
  ::close(fd_);
  if (live_bytes_ != nullptr) live_bytes_->fetch_sub(size_);
}

Result<std::unique_ptr<CachedChunk>> CachedChunk::Create(const std::string& name, uint64_t size,
                                                         std::atomic<uint64_t>* live_bytes) {
  const int fd = ::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Err(Status::FromErrno(errno, "memfd_create " + name));
  auto fail = [&](const char* what) {
    const int e = errno;
    ::close(fd);
    return Err(Status::FromErrno(e, fmt::format("{} {}", what, name)));
  };
  const uint64_t total = ChunkMemfdSize(size);
  if (::ftruncate(fd, static_cast<off_t>(total)) != 0) return fail("size memfd");
  if (::fcntl(fd, F_ADD_SEALS, kSizeSeals) != 0) return fail("seal memfd size");
  std::byte* wdata = MapFd(fd, total, PROT_READ | PROT_WRITE);
  if (wdata == nullptr) return fail("map memfd");
  std::byte* rdata = MapFd(fd, total, PROT_READ);
  if (rdata == nullptr) {
    ::munmap(wdata, total);
    return fail("map memfd");
  }
  // The tail mark starts at the end: nothing of the tail is verified yet.
  __atomic_store_n(reinterpret_cast<uint64_t*>(wdata + VerifiedMarkOffset(size) + kTailMark), size,
                   __ATOMIC_RELEASE);
  return std::unique_ptr<CachedChunk>(new CachedChunk(fd, size, wdata, rdata, live_bytes));
}

uint64_t* CachedChunk::mark(std::byte* base) const {
  return reinterpret_cast<uint64_t*>(base + VerifiedMarkOffset(size_));
}

std::span<std::byte> CachedChunk::writable() {
  return wdata_ == nullptr ? std::span<std::byte>() : std::span<std::byte>(wdata_, size_);
}

void CachedChunk::SetVerified(uint64_t bytes) {
  if (wdata_ == nullptr) return;
  __atomic_store_n(mark(wdata_), std::min(bytes, size_), __ATOMIC_RELEASE);
  Announce(wdata_ + VerifiedMarkOffset(size_));
}

void CachedChunk::SetVerifiedTail(uint64_t offset) {
  if (wdata_ == nullptr) return;
  __atomic_store_n(mark(wdata_) + 1, offset, __ATOMIC_RELEASE);
  Announce(wdata_ + VerifiedMarkOffset(size_));
}

void CachedChunk::Fail() {
  if (wdata_ == nullptr) return;
  __atomic_store_n(mark(wdata_), kFillFailed, __ATOMIC_RELEASE);
  Announce(wdata_ + VerifiedMarkOffset(size_));
  ::munmap(wdata_, ChunkMemfdSize(size_));
  wdata_ = nullptr;
}

Status CachedChunk::Seal() {
  if (wdata_ == nullptr) return Status::OK();
  __atomic_store_n(mark(wdata_) + 1, size_, __ATOMIC_RELEASE);
  __atomic_store_n(mark(wdata_), size_, __ATOMIC_RELEASE);
  Announce(wdata_ + VerifiedMarkOffset(size_));
  ::munmap(wdata_, ChunkMemfdSize(size_));
  wdata_ = nullptr;
  if (::fcntl(fd_, F_ADD_SEALS, kFinalSeals) != 0) return Status::FromErrno(errno, "seal memfd");
  return Status::OK();
}

uint64_t CachedChunk::verified() const { return Load(rdata_ + VerifiedMarkOffset(size_)); }

Status CachedChunk::WaitFor(uint64_t offset, uint64_t n, std::chrono::milliseconds stall,
                            int filler) const {
  return WaitForVerified(rdata_ + VerifiedMarkOffset(size_), size_, offset, n, stall, filler);
}

std::optional<ChunkFdLayout> CheckChunkFd(int fd, uint64_t size) {
  const int seals = ::fcntl(fd, F_GET_SEALS);
  struct stat st{};
  if (seals < 0 || size == 0 || ::fstat(fd, &st) != 0) return std::nullopt;
  const auto bytes = static_cast<uint64_t>(st.st_size);
  if ((seals & kSizeSeals) != kSizeSeals) return std::nullopt;
  if (bytes == ChunkMemfdSize(size)) return ChunkFdLayout::kWithMarks;
  if (bytes == size && (seals & kSealedWhole) == kSealedWhole) return ChunkFdLayout::kSealedWhole;
  return std::nullopt;
}

}  // namespace stoker::node
