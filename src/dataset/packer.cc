#include "dataset/packer.h"

#include <sys/resource.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <chrono>
#include <ctime>
#include <unordered_set>

#include <fmt/format.h>

#include "common/random.h"
#include "dataset/chunk_mixer.h"
#include "dataset/publish.h"
#include "format/chunk.h"
#include "format/snapshot.h"
#include "format/snapshot_builder.h"

namespace stoker::dataset {
namespace {

constexpr uint64_t kMinChunkBytes = 4096;
constexpr uint64_t kSpareDescriptors = 64;  // for what else the pack opens (sources, snapshot)
constexpr uint64_t kChunkFixedBytes = format::kChunkHeaderSize + format::kChunkFooterSize;

// Descriptors this process holds now.
uint64_t OpenDescriptors() {
  std::error_code ec;
  uint64_t n = 0;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end;
       it.increment(ec)) {
    ++n;
  }
  return n;
}

// How many chunks to fill at once: what the options ask, within the memory the destination's
// write buffers take (S3 holds parts in memory) and the file descriptors left to the process
// (local chunk files hold one each; the soft limit is raised as far as the hard one allows).
uint32_t OpenChunks(const PackOptions& options, const Storage& dst) {
  if (!options.tar_input) return 1;  // a tree's files come permuted by the source already
  uint64_t open = std::max(1u, options.open_chunks);
  if (const uint64_t buffer = dst.WriteBufferBytes(); buffer > 0) {
    open = std::min(open, std::max<uint64_t>(1, options.mix_memory_bytes / buffer));
  }
  if (open <= 1) return 1;
  const uint64_t reserved = OpenDescriptors() + kSpareDescriptors;
  struct rlimit limit;
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return static_cast<uint32_t>(open);
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < open + reserved) {
    limit.rlim_cur = limit.rlim_max == RLIM_INFINITY ? open + reserved
                                                     : std::min<rlim_t>(open + reserved, limit.rlim_max);
    (void)::setrlimit(RLIMIT_NOFILE, &limit);
    (void)::getrlimit(RLIMIT_NOFILE, &limit);
  }
  if (limit.rlim_cur != RLIM_INFINITY) {
    open = std::min<uint64_t>(open, limit.rlim_cur > reserved ? limit.rlim_cur - reserved : 1);
  }
  return static_cast<uint32_t>(std::max<uint64_t>(1, open));
}

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

// The chunk files a pack writes: one at a time in input order, or several at once with each
// sample placed by a ChunkMixer (mixed storage order for streamed input).
class ChunkSet {
 public:
  ChunkSet(Storage& storage, uint64_t version, uint64_t chunk_bytes, uint32_t open_chunks,
           uint64_t seed)
      : storage_(storage),
        version_(version),
        // The mixer counts payload plus index entry; header and footer are fixed.
        mixer_(open_chunks, chunk_bytes - std::min(chunk_bytes, kChunkFixedBytes), seed),
        writers_(std::max(1u, open_chunks)),
        sequence_of_(writers_.size(), 0) {}

  // Adds one payload; *chunk_number: its chunk's sequence number within this pack.
  // `remaining_bytes`: estimated payload still to come (ChunkMixer::kUnknown if unknown).
  // `same_sample`: the payload belongs to the sample of the previous one (goes to its chunk).
  Result<format::ChunkEntryRef> Add(std::span<const std::byte> payload, uint64_t remaining_bytes,
                                    bool same_sample, uint32_t* chunk_number) {
    const uint64_t bytes = payload.size() + format::kChunkIndexEntrySize;
    const auto place =
        same_sample ? mixer_.Continue(bytes) : mixer_.Place(bytes, remaining_bytes);
    for (uint32_t slot : place.full) STOKER_RETURN_IF_ERROR(Finish(slot));
    auto& writer = writers_[place.slot];
    if (!writer) {
      // Chunk ids are <version:32><sequence:32>: unique across versions, deterministic within
      // one, and a crashed attempt's leftovers are simply overwritten by the retry.
      const auto sequence = static_cast<uint32_t>(finished_.size());
      const uint64_t id = (version_ << 32) | sequence;
      STOKER_ASSIGN_OR_RETURN(writer, format::ChunkWriter::Create(storage_, id));
      written_.push_back(format::ChunkPath(id));
      finished_.emplace_back();
      sequence_of_[place.slot] = sequence;
    }
    *chunk_number = sequence_of_[place.slot];
    return writer->Add(payload);
  }

  Status FinishAll() {
    for (uint32_t slot = 0; slot < writers_.size(); ++slot) STOKER_RETURN_IF_ERROR(Finish(slot));
    return Status::OK();
  }

  // By sequence number, once FinishAll() succeeded.
  const std::vector<format::ChunkInfo>& finished() const { return finished_; }

  // Best effort: an aborted pack leaves no chunk files behind.
  void RemoveWritten() {
    for (auto& writer : writers_) writer.reset();
    for (const auto& path : written_) (void)storage_.Remove(path);
  }

 private:
  Status Finish(uint32_t slot) {
    if (!writers_[slot]) return Status::OK();
    STOKER_ASSIGN_OR_RETURN(finished_[sequence_of_[slot]], writers_[slot]->Finish());
    writers_[slot].reset();
    return Status::OK();
  }

  Storage& storage_;
  const uint64_t version_;
  ChunkMixer mixer_;
  std::vector<std::unique_ptr<format::ChunkWriter>> writers_;  // by slot
  std::vector<uint32_t> sequence_of_;                          // by slot
  std::vector<format::ChunkInfo> finished_;                    // by sequence
  std::vector<std::string> written_;
};

// Payload still to come, estimated from the source's input bytes (compressed for .tar.gz) and
// the payload those gave so far (`payload_so_far` includes the item just read).
uint64_t RemainingPayload(const PackSource& source, uint64_t payload_so_far) {
  const uint64_t total = source.total_bytes(), consumed = source.consumed_bytes();
  if (total == 0) return ChunkMixer::kUnknown;
  const double ratio = consumed > 0 ? static_cast<double>(payload_so_far) / consumed : 1.0;
  return static_cast<uint64_t>(static_cast<double>(total - std::min(total, consumed)) * ratio);
}

Result<PackSummary> PackInto(PackSource& source, Storage& dst, const PackOptions& options,
                             ChunkSet& chunks, BaseVersion& base, uint64_t version) {
  const auto start = std::chrono::steady_clock::now();
  std::unordered_set<std::string> seen;
  seen.reserve(base.entries.size());
  for (const auto& e : base.entries) seen.insert(e.path);
  const uint32_t base_chunks = static_cast<uint32_t>(base.chunks.size());
  const size_t base_files = base.entries.size();

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
  uint64_t payload_so_far = 0;  // with index entries: what the chunks hold
  while (true) {
    STOKER_ASSIGN_OR_RETURN(auto item, source.Next());
    if (!item) break;
    if (!seen.insert(item->path).second) {
      return Err(Status::InvalidArgument(fmt::format(
          "duplicate path: {}{}", item->path,
          version > 1 ? " (already in the dataset or earlier in the input)" : "")));
    }
    // A tar sample's files (key.jpg, key.cls, ...) arrive together and stay in one chunk.
    const bool same_sample = from_tars && !spec.entries.empty() &&
                             spec.entries.size() > base_files &&
                             format::SampleKeyOf(spec.entries.back().path) ==
                                 format::SampleKeyOf(item->path);
    uint32_t chunk_number = 0;
    const uint64_t entry_bytes = item->bytes.size() + format::kChunkIndexEntrySize;
    const uint64_t remaining = RemainingPayload(source, payload_so_far + entry_bytes);
    auto ref = chunks.Add(item->bytes, remaining, same_sample, &chunk_number);
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
    payload_so_far += entry_bytes;
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
  STOKER_RETURN_IF_ERROR(chunks.FinishAll());
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

Result<StorageOrder> ParseStorageOrder(std::string_view name) {
  if (name == "shuffled") return StorageOrder::kMixed;
  if (name == "path") return StorageOrder::kInput;
  return Err(Status::InvalidArgument(
      fmt::format("order must be 'shuffled' (mixed, the default) or 'path', not '{}'", name)));
}

void SetStorageOrder(StorageOrder order, uint64_t seed, DirectorySourceOptions* source,
                     PackOptions* pack) {
  const bool mixed = order == StorageOrder::kMixed;
  source->shuffle_seed = mixed ? std::optional<uint64_t>(seed) : std::nullopt;
  pack->open_chunks = mixed ? kMixOpenChunks : 1;
  pack->mix_seed = seed;
}

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
  const uint32_t open_chunks = OpenChunks(options, dst);
  ChunkSet chunks(dst, version, options.chunk_bytes, open_chunks,
                  DeriveSeed({options.mix_seed, version}));
  auto summary = PackInto(source, dst, options, chunks, base, version);
  if (summary) summary->open_chunks = open_chunks;
  if (!summary) {
    // Only chunk files of an unpublished version are removed; if publishing itself failed
    // half-way, MANIFEST still names the previous version, which never references them.
    auto now = ReadCurrentVersion(dst);
    if (!now || !*now || (*now)->version != version) chunks.RemoveWritten();
  }
  return summary;
}

}  // namespace stoker::dataset
