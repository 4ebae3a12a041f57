#include "node/disk_tier.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>

#include <fmt/format.h>

#include "format/chunk.h"

namespace stoker::node {

Result<std::unique_ptr<DiskTier>> DiskTier::Open(std::string dir, uint64_t limit_bytes,
                                                 const std::set<uint64_t>& wanted) {
  // Laid out like a dataset: DIR/chunks/<id>.chunk (format::ChunkPath).
  std::error_code ec;
  const std::filesystem::path chunks = std::filesystem::path(dir) / "chunks";
  std::filesystem::create_directories(chunks, ec);
  if (ec) return Err(Status::FromErrno(ec.value(), "create disk tier " + dir));
  std::unique_ptr<DiskTier> tier(new DiskTier(dir, limit_bytes));
  for (const auto& entry : std::filesystem::directory_iterator(chunks, ec)) {
    const auto id = format::ParseChunkPath("chunks/" + entry.path().filename().string());
    const uint64_t size = entry.is_regular_file(ec) ? entry.file_size(ec) : 0;
    if (id && wanted.contains(*id) && tier->bytes_ + size <= limit_bytes) {
      tier->files_[*id] = size;
      tier->bytes_ += size;
    } else {
      std::filesystem::remove_all(entry.path(), ec);  // temporaries, other versions, overflow
    }
  }
  if (ec) return Err(Status::FromErrno(ec.value(), "scan disk tier " + dir));
  return tier;
}

std::string DiskTier::PathOf(uint64_t chunk_id) const {
  return dir_ + "/" + format::ChunkPath(chunk_id);
}

Status DiskTier::Read(uint64_t chunk_id, std::span<std::byte> dst) {
  {
    std::lock_guard lock(mu_);
    auto it = files_.find(chunk_id);
    if (it == files_.end() || it->second != dst.size()) {
      return Status::NotFound(fmt::format("chunk {:016x} is not on disk", chunk_id));
    }
  }
  const std::string path = PathOf(chunk_id);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, path);
  size_t done = 0;
  while (done < dst.size()) {
    const ssize_t n = ::pread(fd, dst.data() + done, dst.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (done != dst.size()) return Status::IOError(path + ": short read");
  std::lock_guard lock(mu_);
  ++hits_;
  return Status::OK();
}

void DiskTier::Write(uint64_t chunk_id, std::span<const std::byte> bytes) {
  {
    std::lock_guard lock(mu_);
    if (files_.contains(chunk_id) || bytes_ + bytes.size() > limit_) return;
    files_[chunk_id] = bytes.size();  // reserved: a concurrent Write of it stops above
    bytes_ += bytes.size();
  }
  const std::string path = PathOf(chunk_id);
  const std::string tmp = path + ".tmp";
  bool ok = false;
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd >= 0) {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    ok = ::close(fd) == 0 && done == bytes.size() && ::rename(tmp.c_str(), path.c_str()) == 0;
  }
  std::lock_guard lock(mu_);
  if (ok) {
    ++writes_;
  } else {
    ::unlink(tmp.c_str());
    files_.erase(chunk_id);
    bytes_ -= bytes.size();
  }
}

void DiskTier::Remove(uint64_t chunk_id) {
  std::lock_guard lock(mu_);
  auto it = files_.find(chunk_id);
  if (it == files_.end()) return;
  ::unlink(PathOf(chunk_id).c_str());
  bytes_ -= it->second;
  files_.erase(it);
}

DiskTierStats DiskTier::stats() const {
  std::lock_guard lock(mu_);
  return {hits_, writes_, bytes_, files_.size(), limit_};
}

}  // namespace stoker::node
