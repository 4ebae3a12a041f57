#include "node/disk_tier.h"

#include <filesystem>

#include <fmt/format.h>

#include "format/chunk.h"
#include "storage/posix_storage.h"

namespace stoker::node {

Result<std::unique_ptr<DiskTier>> DiskTier::Open(const std::string& dir, uint64_t limit_bytes,
                                                 const std::set<uint64_t>& wanted) {
  // Laid out like a dataset: DIR/chunks/<id>.chunk (format::ChunkPath).
  std::error_code ec;
  const std::filesystem::path chunks = std::filesystem::path(dir) / "chunks";
  std::filesystem::create_directories(chunks, ec);
  if (ec) return Err(Status::FromErrno(ec.value(), "create disk tier " + dir));
  std::unique_ptr<DiskTier> tier(new DiskTier(storage::NewPosixStorage(dir), limit_bytes));
  std::filesystem::directory_iterator it(chunks, ec);
  for (; !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const auto& entry = *it;
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

Status DiskTier::Read(uint64_t chunk_id, std::span<std::byte> dst) {
  {
    std::lock_guard lock(mu_);
    auto it = files_.find(chunk_id);
    if (it == files_.end() || it->second != dst.size()) {
      return Status::NotFound(fmt::format("chunk {:016x} is not on disk", chunk_id));
    }
  }
  STOKER_ASSIGN_OR_RETURN(auto file, files_on_disk_->OpenRead(format::ChunkPath(chunk_id)));
  STOKER_RETURN_IF_ERROR(file->ReadAt(0, dst));
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
  const std::string path = format::ChunkPath(chunk_id);
  const std::string tmp = path + ".tmp";
  auto written = [&]() -> Status {
    STOKER_ASSIGN_OR_RETURN(auto file, files_on_disk_->Create(tmp));
    STOKER_RETURN_IF_ERROR(file->Append(bytes));
    STOKER_RETURN_IF_ERROR(file->Close());
    return files_on_disk_->Rename(tmp, path);
  }();
  std::lock_guard lock(mu_);
  if (written.ok()) {
    ++writes_;
  } else {
    (void)files_on_disk_->Remove(tmp);
    files_.erase(chunk_id);
    bytes_ -= bytes.size();
  }
}

void DiskTier::Remove(uint64_t chunk_id) {
  std::lock_guard lock(mu_);
  auto it = files_.find(chunk_id);
  if (it == files_.end()) return;
  (void)files_on_disk_->Remove(format::ChunkPath(chunk_id));
  bytes_ -= it->second;
  files_.erase(it);
}

DiskTierStats DiskTier::stats() const {
  std::lock_guard lock(mu_);
  return {hits_, writes_, bytes_, files_.size(), limit_};
}

}  // namespace stoker::node
