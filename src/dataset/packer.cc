#include "dataset/packer.h"

#include <charconv>
#include <chrono>
#include <ctime>
#include <unordered_set>

#include <fmt/format.h>

#include "dataset/publish.h"
#include "format/chunk.h"
#include "format/snapshot.h"
#include "format/snapshot_builder.h"

namespace stoker::dataset {
namespace {

constexpr uint64_t kMinChunkBytes = 4096;

// WebDataset class labels: a ".cls" member holding a decimal integer.
int32_t LabelFromClsMember(std::string_view path, const std::vector<std::byte>& bytes) {
  if (!path.ends_with(".cls")) return format::kNoLabel;
  std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\r')) {
    text.remove_suffix(1);
  }
  int32_t label = format::kNoLabel;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), label);
  if (ec != std::errc() || ptr != text.data() + text.size() || label < 0) return format::kNoLabel;
  return label;
}

// A finished snapshot held in memory, readable through the FileBytes interface.
class StringBytes final : public FileBytes {
 public:
  explicit StringBytes(std::string data) : data_(std::move(data)) {}
  std::span<const std::byte> bytes() const override {
    return {reinterpret_cast<const std::byte*>(data_.data()), data_.size()};
  }
  std::string_view view() const { return data_; }

 private:
  const std::string data_;
};

// The pre-existing content of the destination when appending.
struct BaseVersion {
  uint64_t version = 0;
  std::vector<format::ChunkInfo> chunks;
  std::vector<format::SnapshotEntry> entries;
  bool grouped = false;
};

Result<BaseVersion> LoadBaseVersion(Storage& storage, const format::Manifest& manifest) {
  STOKER_ASSIGN_OR_RETURN(auto snap, OpenSnapshot(storage, manifest, true));
  BaseVersion base;
  base.version = snap->dataset_version();
  base.grouped = snap->grouped();
  for (uint32_t c = 0; c < snap->chunk_count(); ++c) {
    const auto r = snap->chunk(c);
    base.chunks.push_back({r.id, r.file_size, r.data_crc32c, r.entry_count});
  }
  // Tar datasets carry their labels in the entries; tree labels are recomputed from the
  // directories of the new version (a new class can shift every index, as in ImageFolder).
  const bool explicit_labels = snap->labelled() && snap->grouped();
  base.entries.reserve(snap->file_count());
  for (uint32_t f = 0; f < snap->file_count(); ++f) {
    const auto r = snap->file(f);
    format::SnapshotEntry e;
    e.path = snap->FilePath(f);
    e.chunk = r.chunk;
    e.offset = r.offset;
    e.length = r.length;
    e.crc32c = r.crc32c;
    e.label = explicit_labels ? r.label : format::kNoLabel;
    for (const auto& [k, v] : snap->FileAttributes(f)) e.attributes.emplace_back(k, v);
    base.entries.push_back(std::move(e));
  }
  return base;
}

// Refuses to pack into a directory that holds anything but (leftovers of) a stoker dataset, so
// a typo in DST cannot mix chunks into someone's files.
Status CheckFreshDestination(Storage& storage) {
  auto names = storage.List("");
  if (!names) return names.error().IsNotFound() ? Status::OK() : names.error();
  for (const auto& name : *names) {
    if (name != kChunksDir && name != kSnapshotsDir && name != "MANIFEST.tmp") {
      return Status::AlreadyExists(fmt::format(
          "{} is not empty (it holds '{}'); pack into a new or empty directory",
          storage.Describe(""), name));
    }
  }
  return Status::OK();
}

class ChunkSequence {
 public:
  ChunkSequence(Storage& storage, uint64_t version, uint64_t chunk_bytes)
      : storage_(storage), version_(version), chunk_bytes_(chunk_bytes) {}

  // Adds one payload, rolling to a new chunk file when the current one is full.
  Result<format::ChunkEntryRef> Add(std::span<const std::byte> payload, uint32_t* chunk_number) {
    if (writer_ && writer_->entry_count() > 0 &&
        writer_->projected_size() + payload.size() + format::kChunkIndexEntrySize > chunk_bytes_) {
      STOKER_RETURN_IF_ERROR(FinishCurrent());
    }
    if (!writer_) {
      // Chunk ids are <version:32><sequence:32>: unique across versions, deterministic within
      // one, and a crashed attempt's leftovers are simply overwritten by the retry.
      const uint64_t id = (version_ << 32) | finished_.size();
      STOKER_ASSIGN_OR_RETURN(writer_, format::ChunkWriter::Create(storage_, id));
      written_.push_back(format::ChunkPath(id));
    }
    *chunk_number = static_cast<uint32_t>(finished_.size());
    return writer_->Add(payload);
  }

  Status FinishCurrent() {
    if (!writer_) return Status::OK();
    STOKER_ASSIGN_OR_RETURN(auto info, writer_->Finish());
    finished_.push_back(info);
    writer_.reset();
    return Status::OK();
  }

  const std::vector<format::ChunkInfo>& finished() const { return finished_; }

  // Best effort: an aborted pack leaves no chunk files behind.
  void RemoveWritten() {
    writer_.reset();
    for (const auto& path : written_) (void)storage_.Remove(path);
  }

 private:
  Storage& storage_;
  const uint64_t version_;
  const uint64_t chunk_bytes_;
  std::unique_ptr<format::ChunkWriter> writer_;
  std::vector<format::ChunkInfo> finished_;
  std::vector<std::string> written_;
};

Result<PackSummary> PackInto(PackSource& source, Storage& dst, const PackOptions& options,
                             ChunkSequence& chunks, BaseVersion& base, uint64_t version) {
  const auto start = std::chrono::steady_clock::now();
  std::unordered_set<std::string> seen;
  seen.reserve(base.entries.size());
  for (const auto& e : base.entries) seen.insert(e.path);
  const uint32_t base_chunks = static_cast<uint32_t>(base.chunks.size());

  format::SnapshotSpec spec;
  spec.dataset_version = version;
  spec.created_unix_seconds = static_cast<uint64_t>(std::time(nullptr));
  spec.entries = std::move(base.entries);
  spec.group_by_key = options.tar_input || base.grouped;
  const bool from_tars = options.tar_input || base.grouped;

  PackProgress progress;
  progress.files_total = source.total_items();
  progress.source_bytes_total = source.total_bytes();
  PackSummary summary;
  size_t attributes_used = 0;
  while (true) {
    STOKER_ASSIGN_OR_RETURN(auto item, source.Next());
    if (!item) break;
    if (!seen.insert(item->path).second) {
      return Err(Status::InvalidArgument(fmt::format(
          "duplicate path: {}{}", item->path,
          version > 1 ? " (already in the dataset or earlier in the input)" : "")));
    }
    uint32_t chunk_number = 0;
    auto ref = chunks.Add(item->bytes, &chunk_number);
    if (!ref) return Err(ref.error().WithContext(item->path));
    format::SnapshotEntry e;
    e.chunk = base_chunks + chunk_number;
    e.offset = ref->offset;
    e.length = ref->length;
    e.crc32c = ref->crc32c;
    if (from_tars && options.labels == LabelPolicy::kAuto) {
      e.label = LabelFromClsMember(item->path, item->bytes);
    }
    if (auto it = options.attributes.find(item->path); it != options.attributes.end()) {
      e.attributes = it->second;
      ++attributes_used;
    }
    e.path = std::move(item->path);
    spec.entries.push_back(std::move(e));
    ++summary.files_added;
    summary.bytes_added += ref->length;
    if (options.progress) {
      progress.files_done = summary.files_added;
      progress.bytes_done = summary.bytes_added;
      progress.source_bytes_done = source.consumed_bytes();
      options.progress(progress);
    }
  }
  if (attributes_used != options.attributes.size()) {
    // Some attributes name a path that this pack did not add: say which.
    std::unordered_set<std::string_view> added;
    for (size_t i = spec.entries.size() - summary.files_added; i < spec.entries.size(); ++i) {
      added.insert(spec.entries[i].path);
    }
    for (const auto& [path, attrs] : options.attributes) {
      if (!added.contains(path)) {
        return Err(Status::InvalidArgument(
            fmt::format("attributes given for a path that is not in the input: {}", path)));
      }
    }
  }
  STOKER_RETURN_IF_ERROR(chunks.FinishCurrent());
  STOKER_RETURN_IF_ERROR(dst.SyncDir(kChunksDir));

  spec.chunks = std::move(base.chunks);
  spec.chunks.insert(spec.chunks.end(), chunks.finished().begin(), chunks.finished().end());
  if (options.labels == LabelPolicy::kNone) {
    spec.labels = format::LabelMode::kNone;
  } else {
    spec.labels = from_tars ? format::LabelMode::kExplicit : format::LabelMode::kFirstDirectory;
  }
  summary.files_total = spec.entries.size();
  for (const auto& e : spec.entries) summary.bytes_total += e.length;
  summary.chunks_added = chunks.finished().size();
  summary.chunks_total = spec.chunks.size();
  STOKER_ASSIGN_OR_RETURN(std::string snapshot, format::BuildSnapshot(std::move(spec)));
  // Nothing is published that the reader would reject: open the new snapshot from memory with
  // full validation first (this also yields the counts for the summary).
  auto bytes = std::make_shared<const StringBytes>(std::move(snapshot));
  auto snap = format::Snapshot::Open(bytes, SnapshotPath(version));
  if (!snap) {
    return Err(Status::Internal("the packer built a snapshot its reader rejects: " +
                                snap.error().ToString()));
  }
  STOKER_RETURN_IF_ERROR(PublishVersion(dst, version, bytes->view()));
  summary.version = version;
  summary.snapshot_bytes = bytes->view().size();
  summary.classes = (*snap)->class_count();
  summary.samples = (*snap)->sample_count();
  if (options.progress) options.progress(progress);
  summary.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return summary;
}

}  // namespace

Status PackOptions::Validate() const {
  if (chunk_bytes < kMinChunkBytes) {
    return Status::InvalidArgument(fmt::format("chunk size must be at least {} bytes",
                                               kMinChunkBytes));
  }
  return Status::OK();
}

Result<PackSummary> Pack(PackSource& source, Storage& dst, const PackOptions& options) {
  STOKER_RETURN_IF_ERROR(options.Validate());
  STOKER_ASSIGN_OR_RETURN(auto current, ReadCurrentVersion(dst));
  BaseVersion base;
  if (current) {
    if (!options.append) {
      return Err(Status::AlreadyExists(fmt::format(
          "{} already holds a dataset (version {}); use --append to add files to it",
          dst.Describe(""), current->version)));
    }
    STOKER_ASSIGN_OR_RETURN(base, LoadBaseVersion(dst, *current));
    if (base.grouped != options.tar_input) {
      return Err(Status::InvalidArgument(
          "cannot append a directory tree to a dataset packed from tar shards, or vice versa"));
    }
  } else {
    if (options.append) {
      return Err(Status::NotFound(fmt::format("--append: {} holds no dataset yet", dst.Describe(""))));
    }
    STOKER_RETURN_IF_ERROR(CheckFreshDestination(dst));
  }
  const uint64_t version = base.version + 1;
  if (version >= (1ull << 32)) return Err(Status::ResourceExhausted("too many versions"));
  STOKER_RETURN_IF_ERROR(dst.CreateDirs(kChunksDir));
  ChunkSequence chunks(dst, version, options.chunk_bytes);
  auto summary = PackInto(source, dst, options, chunks, base, version);
  if (!summary) {
    // Only chunk files of an unpublished version are removed; if publishing itself failed
    // half-way, MANIFEST still names the previous version, which never references them.
    auto now = ReadCurrentVersion(dst);
    if (!now || !*now || (*now)->version != version) chunks.RemoveWritten();
  }
  return summary;
}

}  // namespace stoker::dataset
