#include "dataset/packer.h"

#include <sys/resource.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "common/parse_number.h"
#include "common/random.h"
#include "common/unique_id.h"
#include "dataset/addition.h"
#include "dataset/chunk_mixer.h"
#include "dataset/format1.h"
#include "dataset/parts.h"
#include "format/chunk.h"
#include "format/columns.h"
#include "format/segment_builder.h"
#include "format/snapshot_builder.h"
#include "format/versions.h"

namespace stoker::dataset {
namespace {

constexpr uint64_t kMinChunkBytes = 4096;
constexpr uint64_t kSpareDescriptors = 64;  // for what else the pack opens (sources, segment)
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
uint32_t OpenChunks(const PackOptions& options, const PackSource& source, const Storage& dst) {
  // A tree's files come permuted by the source already (grouped or not).
  if (!options.group_samples || source.permuted()) return 1;
  uint64_t open = std::max(1u, options.open_chunks);
  if (const uint64_t buffer = dst.WriteBufferBytes(); buffer > 0) {
    open = std::min(open, std::max<uint64_t>(1, options.mix_memory_bytes / buffer));
  }
  if (open <= 1) return 1;
  const uint64_t reserved = OpenDescriptors() + kSpareDescriptors;
  struct rlimit limit;
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return static_cast<uint32_t>(open);
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < open + reserved) {
    limit.rlim_cur = limit.rlim_max == RLIM_INFINITY
                         ? open + reserved
                         : std::min<rlim_t>(open + reserved, limit.rlim_max);
    (void)::setrlimit(RLIMIT_NOFILE, &limit);
    (void)::getrlimit(RLIMIT_NOFILE, &limit);
  }
  if (limit.rlim_cur != RLIM_INFINITY) {
    open = std::min<uint64_t>(open, limit.rlim_cur > reserved ? limit.rlim_cur - reserved : 1);
  }
  return static_cast<uint32_t>(std::max<uint64_t>(1, open));
}

// Class labels from members: WebDataset's ".cls" (or a column dataset's label column, `ext`)
// holding a decimal integer (other text: no label). A label above kMaxClsLabel is refused,
// naming the member.
Result<int32_t> LabelFromMember(std::string_view path, const std::vector<std::byte>& bytes,
                                std::string_view ext) {
  if (ext.empty() || !path.ends_with(ext) || path.size() == ext.size() ||
      path[path.size() - ext.size() - 1] != '.') {
    return format::kNoLabel;
  }
  std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\r')) {
    text.remove_suffix(1);
  }
  int64_t label = format::kNoLabel;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), label);
  if (ec == std::errc::result_out_of_range && !text.starts_with('-'))
    label = INT64_MAX;
  else if (ec != std::errc() || ptr != text.data() + text.size() || label < 0)
    return format::kNoLabel;
  if (label > kMaxClsLabel) {
    return Err(Status::InvalidArgument(fmt::format(
        "{}: label {} is above the largest a .{} member may hold ({}; classes are named "
        "\"0\" up to the largest label)",
        path, text, ext, kMaxClsLabel)));
  }
  return static_cast<int32_t>(label);
}

// The extension of the members that label samples: ".cls", or a column dataset's label column
// (none if it has none).
Result<std::string> LabelMemberExtension(const PackOptions& options) {
  if (options.columns.empty()) return std::string("cls");
  STOKER_ASSIGN_OR_RETURN(const format::Schema schema, format::ParseSchema(options.columns));
  return schema.label;
}

// Refuses to pack into a directory that holds anything but (leftovers of) a stoker dataset, so
// a typo in DST cannot mix chunks into someone's files.
Status CheckFreshDestination(Storage& storage) {
  auto names = storage.List("");
  if (!names) return names.error().IsNotFound() ? Status::OK() : names.error();
  for (const auto& name : *names) {
    if (name != kChunksDir && name != format::kSegmentsDir && name != format::kVersionsDir &&
        name != kPartsDir && name != "gc") {
      return Status::AlreadyExists(
          fmt::format("{} is not empty (it holds '{}'); pack into a new or empty directory",
                      storage.Describe(""), name));
    }
  }
  return Status::OK();
}

// The chunk files a pack writes: one at a time in input order, or several at once with each
// sample placed by a ChunkMixer (mixed storage order for streamed input).
class ChunkSet {
 public:
  ChunkSet(Storage& storage, uint64_t chunk_bytes, uint32_t open_chunks, uint64_t seed)
      : storage_(storage),
        // The mixer counts payload plus index entry; header and footer are fixed.
        mixer_(open_chunks, chunk_bytes - std::min(chunk_bytes, kChunkFixedBytes), seed),
        writers_(std::max(1u, open_chunks)),
        sequence_of_(writers_.size(), 0) {}

  // Adds one payload; *chunk_number: its chunk's sequence number within this pack, *entry:
  // its rank in that chunk. `remaining_bytes`: estimated payload still to come
  // (ChunkMixer::kUnknown if unknown). `same_sample`: the payload belongs to the sample of the
  // previous one (goes to its chunk).
  Result<format::ChunkEntryRef> Add(std::span<const std::byte> payload, uint64_t remaining_bytes,
                                    bool same_sample, uint32_t* chunk_number, uint64_t* entry) {
    const uint64_t bytes = payload.size() + format::kChunkIndexEntrySize;
    const auto place = same_sample ? mixer_.Continue(bytes) : mixer_.Place(bytes, remaining_bytes);
    for (uint32_t slot : place.full) STOKER_RETURN_IF_ERROR(Finish(slot));
    auto& writer = writers_[place.slot];
    if (!writer) {
      // Random ids (docs/format.md §2): writers on any machine never pick the same name, so
      // concurrent packs into one dataset never touch each other's chunks.
      const uint64_t id = UniqueId();
      STOKER_ASSIGN_OR_RETURN(writer, format::ChunkWriter::Create(storage_, id));
      written_.push_back(format::ChunkPath(id));
      sequence_of_[place.slot] = static_cast<uint32_t>(finished_.size());
      finished_.emplace_back();
    }
    *chunk_number = sequence_of_[place.slot];
    *entry = writer->entry_count();
    return writer->Add(payload);
  }

  // A streamed item (one too large to hold in memory) in a chunk of its own, with a wide index
  // if it needs one; *chunk_number as for Add(), and it is entry 0.
  Result<format::ChunkEntryRef> AddStreamed(SourceItem& item, uint32_t* chunk_number,
                                            uint64_t* entry) {
    const uint64_t id = UniqueId();
    STOKER_ASSIGN_OR_RETURN(
        auto writer,
        format::ChunkWriter::Create(storage_, id, item.size() > format::kMaxNarrowPayload));
    written_.push_back(format::ChunkPath(id));
    *chunk_number = static_cast<uint32_t>(finished_.size());
    *entry = 0;
    finished_.emplace_back();
    std::vector<std::byte> buffer(std::min<uint64_t>(item.size(), kStreamBuffer));
    for (uint64_t left = item.size(); left > 0;) {
      const std::span<std::byte> piece(buffer.data(), std::min<uint64_t>(left, buffer.size()));
      STOKER_RETURN_IF_ERROR(item.stream->ReadExactly(piece));
      STOKER_RETURN_IF_ERROR(writer->AppendToEntry(piece));
      left -= piece.size();
    }
    STOKER_ASSIGN_OR_RETURN(const auto ref, writer->EndEntry());
    STOKER_ASSIGN_OR_RETURN(finished_.back(), writer->Finish());
    return ref;
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

  static constexpr uint64_t kStreamBuffer = 4 << 20;
  Storage& storage_;
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

Status Interrupted() {
  return Status::Cancelled("interrupted: nothing published (the chunks written were removed)");
}

// Reads the whole input into chunks, and their metadata into the addition's SegmentBuilder
// (sorted on disk, so memory does not grow with the file count). Paths must be new within the
// input; whether they are new to the dataset is checked against the version this pack extends
// when it publishes.
Status ReadInput(PackSource& source, const PackOptions& options, ChunkSet& chunks, Addition* add,
                 PackSummary* summary) {
  PackProgress progress;
  progress.files_total = source.total_items();
  progress.source_bytes_total = source.total_bytes();
  std::unordered_set<std::string_view> attributed;  // paths of options.attributes seen
  uint64_t payload_so_far = 0;                      // with index entries: what the chunks hold
  std::string previous_sample;
  STOKER_ASSIGN_OR_RETURN(const std::string label_ext, LabelMemberExtension(options));
  add->files = std::make_unique<format::SegmentBuilder>(options.sort);
  while (true) {
    if (options.stop_requested && options.stop_requested()) return Interrupted();
    STOKER_ASSIGN_OR_RETURN(auto item, source.Next());
    if (!item) break;
    // A tar sample's files (key.jpg, key.cls, ...) arrive together and stay in one chunk.
    bool same_sample = false;
    if (options.group_samples) {
      const std::string_view sample = format::SampleKeyOf(item->path);
      same_sample = summary->files_added > 0 && sample == previous_sample;
      previous_sample = sample;
    }
    uint32_t chunk_number = 0;
    uint64_t entry = 0;
    const uint64_t entry_bytes = item->size() + format::kChunkIndexEntrySize;
    const uint64_t remaining = RemainingPayload(source, payload_so_far + entry_bytes);
    auto ref = item->stream
                   ? chunks.AddStreamed(*item, &chunk_number, &entry)
                   : chunks.Add(item->bytes, remaining, same_sample, &chunk_number, &entry);
    if (!ref) return ref.error().WithContext(item->path);
    int32_t label = format::kNoLabel;
    if (options.group_samples && options.labels == LabelPolicy::kAuto && !item->stream) {
      STOKER_ASSIGN_OR_RETURN(label, LabelFromMember(item->path, item->bytes, label_ext));
    }
    std::span<const format::Attribute> attributes;
    if (auto it = options.attributes.find(item->path); it != options.attributes.end()) {
      attributes = it->second;
      attributed.insert(it->first);
    }
    STOKER_RETURN_IF_ERROR(add->files->Add(
        {item->path, chunk_number, entry, ref->length, ref->crc32c, label, attributes}));
    ++summary->files_added;
    summary->bytes_added += ref->length;
    payload_so_far += entry_bytes;
    if (options.progress) {
      progress.files_done = summary->files_added;
      progress.bytes_done = summary->bytes_added;
      progress.source_bytes_done = source.consumed_bytes();
      options.progress(progress);
    }
  }
  if (attributed.size() != options.attributes.size()) {
    for (const auto& [path, attrs] : options.attributes) {
      if (!attributed.contains(path)) {
        return Status::InvalidArgument(
            fmt::format("attributes given for a path that is not in the input: {}", path));
      }
    }
  }
  STOKER_RETURN_IF_ERROR(chunks.FinishAll());
  if (options.stop_requested && options.stop_requested()) return Interrupted();
  // A tar sample's label is its .cls member's: every file of the sample carries it.
  const Status sealed = add->files->Seal(
      chunks.finished(),
      !options.group_samples ? format::Grouping::kFiles : format::Grouping::kSamplesSharingLabels);
  const std::optional<std::string>& duplicate = add->files->duplicate_path();
  if (!sealed.ok() && duplicate) {
    return Status::InvalidArgument(fmt::format("duplicate path in the input: {}", *duplicate));
  }
  STOKER_RETURN_IF_ERROR(sealed);
  if (options.progress) options.progress(progress);
  return Status::OK();
}

}  // namespace

std::vector<std::string> PackNotes(const PackSummary& summary) {
  std::vector<std::string> notes;
  if (std::string line = LeftOutLine(summary.left_out); !line.empty()) notes.push_back(line);
  if (summary.no_labels_found) {
    notes.push_back(summary.samples_grouped
                        ? "no labels: no sample has a .cls member (--labels none says so quietly)"
                        : "no labels: the files are not in class directories (labels come from "
                          "the first directory level; --labels none says so quietly)");
  }
  return notes;
}

Result<StorageOrder> ParseStorageOrder(std::string_view name) {
  if (name == "shuffled") return StorageOrder::kMixed;
  if (name == "path") return StorageOrder::kInput;
  return Err(Status::InvalidArgument(
      fmt::format("order must be 'shuffled' (mixed, the default) or 'path', not '{}'", name)));
}

std::function<void(const PackProgress&)> ShowProgressOn(ProgressBar& bar) {
  return [&bar](const PackProgress& p) {
    if (p.files_total > 0) {
      bar.Update(p.files_done, p.files_total, p.bytes_done);
    } else {
      bar.Update(p.source_bytes_done >> 20, p.source_bytes_total >> 20, p.bytes_done, "MiB read");
    }
  };
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
    return Status::InvalidArgument(
        fmt::format("chunk size must be at least {} bytes", kMinChunkBytes));
  }
  if (!columns.empty()) {
    if (!group_samples) return Status::InvalidArgument("a column dataset groups its samples");
    if (auto schema = format::ParseSchema(columns); !schema) return schema.error();
  }
  return Status::OK();
}

Result<PackSummary> Pack(PackSource& source, Storage& dst, const PackOptions& options) {
  STOKER_RETURN_IF_ERROR(options.Validate());
  const auto start = std::chrono::steady_clock::now();
  // Fail before reading any input where the outcome is known; the publish step checks again
  // against whatever version is newest by then.
  STOKER_ASSIGN_OR_RETURN(auto latest, format::ReadLatestVersion(dst));
  if (options.part) {
    STOKER_RETURN_IF_ERROR(ValidateJobName(options.part->job));  // a part fits any dataset
  } else if (!latest) {
    STOKER_ASSIGN_OR_RETURN(auto old, ReadFormat1Manifest(dst));
    if (old) {
      return Err(
          Status::Unsupported(fmt::format("{} is a format-1 dataset; run `stoker upgrade {}` first",
                                          dst.Describe(""), dst.Describe(""))));
    }
    if (options.append) {
      return Err(
          Status::NotFound(fmt::format("--append: {} holds no dataset yet", dst.Describe(""))));
    }
    STOKER_RETURN_IF_ERROR(CheckFreshDestination(dst));
  } else if (!options.append) {
    return Err(Status::AlreadyExists(
        fmt::format("{} already holds a dataset (version {}); use --append to add files to it",
                    dst.Describe(""), latest->version)));
  } else {
    STOKER_RETURN_IF_ERROR(CheckSameColumns(latest->columns, options.columns));
  }
  // Before the first chunk: gc holds back what a writer with a lease writes.
  STOKER_ASSIGN_OR_RETURN(auto lease, WriterLease::Take(dst));
  STOKER_RETURN_IF_ERROR(dst.CreateDirs(kChunksDir));
  const uint32_t open_chunks = OpenChunks(options, source, dst);
  const uint64_t next_version = latest ? latest->version + 1 : 1;
  ChunkSet chunks(dst, options.chunk_bytes, open_chunks,
                  DeriveSeed({options.mix_seed, next_version}));
  PackSummary summary;
  summary.open_chunks = open_chunks;
  Addition add;
  std::string segment_path;
  Status read = ReadInput(source, options, chunks, &add, &summary);
  if (read.ok()) read = dst.SyncDir(kChunksDir);
  add.group_samples = options.group_samples;
  add.labels = options.labels;
  add.columns = options.columns;
  Result<PackSummary> result = Err(read);
  if (read.ok() && options.part) {
    auto part = WritePart(dst, add, *options.part);
    if (part) {
      summary.part_path = *part;
      summary.chunks_added = add.files->chunks().size();
      result = summary;
    } else {
      result = Err(part.error());
    }
  } else if (read.ok()) {
    result =
        PublishAddition(dst, add, options.append ? PublishPolicy::kAppend : PublishPolicy::kFresh,
                        *lease, summary, &segment_path);
  }
  if (result) {
    result->left_out = source.left_out();
    result->samples_grouped = options.group_samples;
    result->no_labels_found = options.labels == LabelPolicy::kAuto && options.columns.empty() &&
                              !options.part && result->classes == 0 && result->files_added > 0;
  }
  if (!result) {
    // What no version lists is removed again. A publish whose outcome is unknown (an error
    // after the store may have created the record) is resolved by reading the versions: the
    // chunks stay if one lists this pack's segment.
    bool listed = false;
    if (!segment_path.empty()) {
      const uint64_t id =
          ParseUnsigned<uint64_t>(
              std::string_view(segment_path).substr(format::kSegmentsDir.size() + 1, 16), 16)
              .value_or(0);
      auto now = format::ReadLatestVersion(dst);
      if (!now) {
        listed = true;  // cannot tell: keep everything rather than break a published version
      } else if (const std::optional<format::VersionRecord>& record = *now) {
        for (const auto& ref : record->segments) listed |= ref.id == id;
      }
      if (!listed) (void)dst.Remove(segment_path);
    }
    if (!listed) chunks.RemoveWritten();
    return result;
  }
  result->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace stoker::dataset
