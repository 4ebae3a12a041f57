#include "stoker/dataset.h"

#include <mutex>
#include <unordered_map>

#include <fmt/format.h>

#include "common/crc32c.h"
#include "dataset/publish.h"
#include "format/chunk.h"
#include "format/snapshot.h"

namespace stoker {

struct Dataset::Impl {
  std::shared_ptr<Storage> storage;
  std::string snapshot_path;
  std::unique_ptr<format::Snapshot> snapshot;
  // Chunk files are opened on first use and kept open: one open per chunk, not per read.
  mutable std::mutex mu;
  mutable std::unordered_map<uint32_t, std::shared_ptr<RandomAccessFile>> chunks;

  Result<std::shared_ptr<RandomAccessFile>> Chunk(uint32_t index) const {
    {
      std::lock_guard lock(mu);
      if (auto it = chunks.find(index); it != chunks.end()) return it->second;
    }
    // Opened without the lock: over the network an open is a round trip, and first reads of
    // different chunks must not queue behind each other. Two threads may open the same chunk;
    // the first to finish is kept.
    const std::string path = format::ChunkPath(snapshot->chunk(index).id);
    auto file = storage->OpenRead(path);
    if (!file) return Err(file.error());
    // A chunk of another size (truncated, replaced) is corrupt for every file in it; reading
    // past its end would otherwise surface as a retryable IOError.
    if (const uint64_t want = snapshot->chunk(index).file_size; (*file)->Size() != want) {
      return Err(Status::Corruption(fmt::format("{}: {} bytes, the snapshot says {}",
                                                storage->Describe(path), (*file)->Size(), want)));
    }
    std::shared_ptr<RandomAccessFile> shared = std::move(*file);
    std::lock_guard lock(mu);
    return chunks.try_emplace(index, std::move(shared)).first->second;
  }
};

Dataset::Dataset(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Dataset::~Dataset() = default;

Result<std::unique_ptr<Dataset>> Dataset::Open(std::string_view uri,
                                               const DatasetOpenOptions& options) {
  STOKER_ASSIGN_OR_RETURN(auto storage, OpenStorage(uri));
  return Open(std::move(storage), options);
}

Result<std::unique_ptr<Dataset>> Dataset::Open(std::shared_ptr<Storage> storage,
                                               const DatasetOpenOptions& options) {
  auto impl = std::make_unique<Impl>();
  STOKER_ASSIGN_OR_RETURN(auto current, dataset::ReadCurrentVersion(*storage));
  if (!current.has_value()) {
    return Err(Status::NotFound(
        fmt::format("{} is not a stoker dataset (no MANIFEST)", storage->Describe(""))));
  }
  STOKER_ASSIGN_OR_RETURN(impl->snapshot,
                          dataset::OpenSnapshot(*storage, *current, options.verify_snapshot));
  impl->snapshot_path = current->snapshot_path;
  impl->storage = std::move(storage);
  return std::unique_ptr<Dataset>(new Dataset(std::move(impl)));
}

uint64_t Dataset::version() const { return impl_->snapshot->dataset_version(); }
uint32_t Dataset::file_count() const { return impl_->snapshot->file_count(); }
uint32_t Dataset::sample_count() const { return impl_->snapshot->sample_count(); }
std::pair<uint32_t, uint32_t> Dataset::SampleFiles(uint32_t sample) const {
  return impl_->snapshot->SampleFiles(sample);
}
int32_t Dataset::SampleLabel(uint32_t sample) const { return impl_->snapshot->sample_label(sample); }
uint32_t Dataset::class_count() const { return impl_->snapshot->class_count(); }
std::string_view Dataset::ClassName(uint32_t label) const {
  return impl_->snapshot->class_name(label);
}
const format::Snapshot& Dataset::snapshot() const { return *impl_->snapshot; }
Result<std::shared_ptr<RandomAccessFile>> Dataset::ChunkFile(uint32_t chunk) const {
  if (chunk >= impl_->snapshot->chunk_count()) {
    return Err(Status::InvalidArgument(fmt::format("chunk index {} out of range", chunk)));
  }
  return impl_->Chunk(chunk);
}
Storage& Dataset::storage() const { return *impl_->storage; }
const std::string& Dataset::snapshot_path() const { return impl_->snapshot_path; }

Result<uint32_t> Dataset::Find(std::string_view path) const {
  if (auto index = impl_->snapshot->FindFile(path)) return *index;
  return Err(Status::NotFound(fmt::format("no such file in dataset: {}", path)));
}

Result<FileInfo> Dataset::Stat(uint32_t file) const {
  if (file >= file_count()) {
    return Err(Status::InvalidArgument(
        fmt::format("file index {} out of range (dataset has {})", file, file_count())));
  }
  const auto& snap = *impl_->snapshot;
  const format::FileRecord r = snap.file(file);
  return FileInfo{file, snap.FilePath(file), r.length, r.crc32c, r.label, snap.chunk(r.chunk).id,
                  r.offset};
}

std::string Dataset::FilePath(uint32_t file) const { return impl_->snapshot->FilePath(file); }

std::vector<std::pair<std::string_view, std::string_view>> Dataset::FileAttributes(
    uint32_t file) const {
  return impl_->snapshot->FileAttributes(file);
}

Status Dataset::ReadFileInto(uint32_t file, std::span<std::byte> dst) const {
  if (file >= file_count()) {
    return Status::InvalidArgument(fmt::format("file index {} out of range", file));
  }
  const format::FileRecord r = impl_->snapshot->file(file);
  if (dst.size() != r.length) {
    return Status::InvalidArgument(
        fmt::format("buffer of {} bytes for {} ({} bytes)", dst.size(), FilePath(file), r.length));
  }
  auto chunk_or = impl_->Chunk(r.chunk);
  if (!chunk_or) return chunk_or.error().WithContext(fmt::format("reading {}", FilePath(file)));
  const auto& chunk = *chunk_or;
  if (Status s = chunk->ReadAt(r.offset, dst); !s.ok()) {
    return s.WithContext(fmt::format("reading {}", FilePath(file)));
  }
  const uint32_t actual = crc32c::Value(dst);
  if (actual != r.crc32c) {
    return Status::Corruption(fmt::format(
        "{}: CRC32C mismatch (stored {:08x}, read {:08x}) in {}", FilePath(file), r.crc32c, actual,
        impl_->storage->Describe(format::ChunkPath(impl_->snapshot->chunk(r.chunk).id))));
  }
  return Status::OK();
}

Result<std::vector<std::byte>> Dataset::ReadFile(uint32_t file) const {
  if (file >= file_count()) {
    return Err(Status::InvalidArgument(fmt::format("file index {} out of range", file)));
  }
  std::vector<std::byte> out(impl_->snapshot->file(file).length);
  STOKER_RETURN_IF_ERROR(ReadFileInto(file, out));
  return out;
}

Result<std::vector<DirEntry>> Dataset::List(std::string_view dir) const {
  const auto& snap = *impl_->snapshot;
  const auto d = snap.FindDir(dir);
  if (!d) {
    if (snap.FindFile(dir)) return Err(Status::InvalidArgument(fmt::format("not a directory: {}", dir)));
    return Err(Status::NotFound(fmt::format("no such directory in dataset: {}", dir)));
  }
  const format::DirRecord r = snap.dir(*d);
  std::vector<DirEntry> out;
  out.reserve(r.child_count + r.file_count);
  for (uint32_t k = 0; k < r.child_count; ++k) {
    out.push_back({std::string(snap.dir_name(r.first_child + k)), true, r.first_child + k, 0});
  }
  for (uint32_t k = 0; k < r.file_count; ++k) {
    const uint32_t f = r.first_file + k;
    out.push_back({std::string(snap.file_name(f)), false, f, snap.file(f).length});
  }
  return out;
}

}  // namespace stoker
