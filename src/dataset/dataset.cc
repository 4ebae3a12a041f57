#include "stoker/dataset.h"

#include <mutex>
#include <unordered_map>

#include <fmt/format.h>

#include "common/crc32c.h"
#include "dataset/format1.h"
#include "dataset/version_view.h"
#include "format/chunk.h"
#include "format/versions.h"

namespace stoker {
namespace {

// Paths as users type them: a leading or trailing '/' is ignored.
std::string_view Normalize(std::string_view path) {
  while (path.starts_with('/')) path.remove_prefix(1);
  while (path.ends_with('/')) path.remove_suffix(1);
  return path;
}

}  // namespace

struct Dataset::Impl {
  std::shared_ptr<Storage> storage;
  std::unique_ptr<dataset::VersionView> view;
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
    STOKER_ASSIGN_OR_RETURN(const dataset::ChunkRef ref, view->chunk(index));
    const std::string path = format::ChunkPath(ref.id);
    auto file = storage->OpenRead(path);
    if (!file) return Err(file.error());
    // A chunk of another size (truncated, replaced) is corrupt for every file in it; reading
    // past its end would otherwise surface as a retryable IOError.
    if (const uint64_t want = ref.file_size; (*file)->Size() != want) {
      return Err(Status::Corruption(fmt::format("{}: {} bytes, the metadata says {}",
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
  format::VersionRecord record;
  if (options.version) {
    STOKER_ASSIGN_OR_RETURN(record, format::ReadVersion(*storage, *options.version));
  } else {
    STOKER_ASSIGN_OR_RETURN(auto latest, format::ReadLatestVersion(*storage));
    if (!latest) {
      STOKER_ASSIGN_OR_RETURN(auto old, dataset::ReadFormat1Manifest(*storage));
      if (old) {
        return Err(Status::Unsupported(fmt::format(
            "{} is a format-1 dataset (MANIFEST); run `stoker upgrade {}` to convert it in "
            "place (its chunks are kept)",
            storage->Describe(""), storage->Describe(""))));
      }
      return Err(Status::NotFound(
          fmt::format("{} is not a stoker dataset (no versions/)", storage->Describe(""))));
    }
    record = std::move(*latest);
  }
  STOKER_ASSIGN_OR_RETURN(impl->view, dataset::VersionView::Open(*storage, std::move(record),
                                                                 options.verify_checksums));
  if (options.read_locations) STOKER_RETURN_IF_ERROR(impl->view->LoadLocations());
  impl->storage = std::move(storage);
  return std::unique_ptr<Dataset>(new Dataset(std::move(impl)));
}

uint64_t Dataset::version() const { return impl_->view->version(); }
uint64_t Dataset::file_count() const { return impl_->view->file_count(); }
uint64_t Dataset::sample_count() const { return impl_->view->sample_count(); }
Result<std::pair<uint64_t, uint64_t>> Dataset::SampleFiles(uint64_t sample) const {
  if (sample >= sample_count()) {
    return Err(Status::InvalidArgument(fmt::format("sample index {} out of range", sample)));
  }
  STOKER_RETURN_IF_ERROR(impl_->view->LoadSamples());
  return impl_->view->SampleFiles(sample);
}
Result<int32_t> Dataset::SampleLabel(uint64_t sample) const {
  STOKER_ASSIGN_OR_RETURN(const auto files, SampleFiles(sample));
  STOKER_ASSIGN_OR_RETURN(auto l, impl_->view->Location(files.first));
  return l.label;
}
uint32_t Dataset::class_count() const { return impl_->view->class_count(); }
std::string_view Dataset::ClassName(uint32_t label) const { return impl_->view->class_name(label); }
struct DatasetAccess {
  static const dataset::VersionView& View(const Dataset& dataset) { return *dataset.impl_->view; }
};

const dataset::VersionView& dataset::ViewOf(const Dataset& dataset) {
  return DatasetAccess::View(dataset);
}
Status Dataset::LoadLocations() const { return impl_->view->LoadLocations(); }
Result<std::shared_ptr<RandomAccessFile>> Dataset::ChunkFile(uint32_t chunk) const {
  if (chunk >= impl_->view->chunk_count()) {
    return Err(Status::InvalidArgument(fmt::format("chunk index {} out of range", chunk)));
  }
  return impl_->Chunk(chunk);
}
Storage& Dataset::storage() const { return *impl_->storage; }

Result<uint64_t> Dataset::Find(std::string_view path) const {
  STOKER_ASSIGN_OR_RETURN(auto index, impl_->view->FindFile(Normalize(path)));
  if (index) return *index;
  return Err(Status::NotFound(fmt::format("no such file in dataset: {}", path)));
}

Status Dataset::CheckIndex(uint64_t file) const {
  if (file < file_count()) return Status::OK();
  return Status::InvalidArgument(
      fmt::format("file index {} out of range (dataset has {})", file, file_count()));
}

Result<FileInfo> Dataset::Stat(uint64_t file) const {
  STOKER_RETURN_IF_ERROR(CheckIndex(file));
  STOKER_ASSIGN_OR_RETURN(auto l, impl_->view->Location(file));
  STOKER_ASSIGN_OR_RETURN(auto path, impl_->view->FilePath(file));
  STOKER_ASSIGN_OR_RETURN(const dataset::ChunkRef chunk, impl_->view->chunk(l.chunk));
  return FileInfo{file, std::move(path), l.length, l.crc32c, l.label, chunk.id, l.chunk, l.offset};
}

Result<std::string> Dataset::Path(uint64_t file) const {
  STOKER_RETURN_IF_ERROR(CheckIndex(file));
  return impl_->view->FilePath(file);
}

std::string Dataset::FilePath(uint64_t file) const {
  if (file < file_count()) {
    if (auto path = impl_->view->FilePath(file)) return std::move(*path);
  }
  return fmt::format("file #{}", file);
}

Result<std::vector<std::pair<std::string, std::string>>> Dataset::FileAttributes(
    uint64_t file) const {
  STOKER_RETURN_IF_ERROR(CheckIndex(file));
  return impl_->view->Attributes(file);
}

Status Dataset::ReadFileInto(uint64_t file, std::span<std::byte> dst) const {
  STOKER_RETURN_IF_ERROR(CheckIndex(file));
  STOKER_ASSIGN_OR_RETURN(const dataset::FileLocation r, impl_->view->Location(file));
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
  return format::CheckPayload(r.crc32c, dst, [&] {
    return format::PayloadNames{FilePath(file),
                                impl_->storage->Describe(impl_->view->ChunkName(r.chunk))};
  });
}

Result<std::vector<std::byte>> Dataset::ReadFile(uint64_t file) const {
  STOKER_RETURN_IF_ERROR(CheckIndex(file));
  STOKER_ASSIGN_OR_RETURN(const dataset::FileLocation r, impl_->view->Location(file));
  // The chunk first: its real size must be the metadata's, so the length below is backed by
  // bytes that exist before it sizes an allocation.
  if (auto chunk = impl_->Chunk(r.chunk); !chunk) {
    return Err(chunk.error().WithContext(fmt::format("reading {}", FilePath(file))));
  }
  std::vector<std::byte> out(r.length);
  STOKER_RETURN_IF_ERROR(ReadFileInto(file, out));
  return out;
}

Result<bool> Dataset::IsDir(std::string_view path) const {
  return impl_->view->IsDir(Normalize(path));
}

Result<std::vector<DirEntry>> Dataset::List(std::string_view dir) const {
  return impl_->view->List(Normalize(dir));
}

}  // namespace stoker
