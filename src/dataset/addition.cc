#include "dataset/addition.h"

#include <algorithm>
#include <ctime>
#include <optional>
#include <unordered_map>

#include <fmt/format.h>

#include "dataset/commit_version.h"
#include "dataset/version_view.h"
#include "format/chunk.h"
#include "format/segment_builder.h"
#include "format/segment_layout.h"
#include "format/snapshot_layout.h"
#include "format/versions.h"

namespace stoker::dataset {
namespace {

// The flags of a new dataset, from its first pack.
uint32_t FirstFlags(const Addition& add) {
  uint32_t flags = add.group_samples ? format::kSegmentGrouped : 0;
  if (add.labels == LabelPolicy::kNone) return flags;
  if (add.group_samples) return add.any_cls_label() ? flags | format::kSegmentLabelled : flags;
  const bool all_in_dirs = add.files->file_count() > 0 && !add.files->a_file_outside_dirs();
  return all_in_dirs ? flags | format::kSegmentLabelled | format::kSegmentLabelsFromDirs : flags;
}

// Checks that the addition fits the dataset it extends (same kind of input and labels).
Status CheckCompatible(const Addition& add, uint32_t flags) {
  if (((flags & format::kSegmentGrouped) != 0) != add.group_samples) {
    return Status::InvalidArgument(
        "cannot append a directory tree to a dataset packed from tar shards, or vice versa");
  }
  if (flags & format::kSegmentLabelsFromDirs) {
    if (const auto& outside = add.files->a_file_outside_dirs()) {
      return Status::InvalidArgument(fmt::format(
          "{} is outside a class directory, but the dataset's labels are its first-level "
          "directories",
          *outside));
    }
  } else if (add.any_cls_label() && !(flags & format::kSegmentLabelled)) {
    return Status::InvalidArgument(
        "the input carries .cls labels but the dataset has none; pass --labels none to add it "
        "without them");
  }
  return Status::OK();
}

}  // namespace

Status CheckSameColumns(std::string_view ours, std::string_view theirs) {
  if (ours == theirs) return Status::OK();
  if (ours.empty()) {
    return Status::InvalidArgument(
        "the dataset holds files, not typed columns: add to it with `stoker pack --append`");
  }
  if (theirs.empty()) {
    return Status::InvalidArgument(fmt::format(
        "the dataset holds typed columns ({}): add to it with stoker.Writer(..., append=True)",
        ours));
  }
  return Status::InvalidArgument(
      fmt::format("the dataset's columns are '{}'; this writer's are '{}'", ours, theirs));
}

namespace {

// Numbers the addition after `base` (nullptr: the first version): file, sample and class
// numbers continue where the base's end; a class directory seen before keeps its label. Done
// again on every attempt, since another writer may have published first.
format::SegmentNumbering Number(const format::SegmentBuilder& files, const VersionView* base,
                                uint32_t flags) {
  format::SegmentNumbering n;
  n.flags = flags;
  n.first_file = base ? base->record().files : 0;
  n.first_sample = base ? base->record().samples : 0;
  n.first_label = base ? base->class_count() : 0;
  if (flags & format::kSegmentLabelsFromDirs) {
    n.labels = format::LabelSource::kDirs;
    std::unordered_map<std::string_view, int32_t> label_of;
    if (base) {
      for (uint32_t k = 0; k < base->class_count(); ++k) label_of[base->class_name(k)] = k;
    }
    // first_level_dirs() is sorted: new classes get labels in name order, after the old ones.
    for (const std::string& cls : files.first_level_dirs()) {
      auto [it, added] = label_of.try_emplace(cls, -1);
      if (added) {
        it->second = static_cast<int32_t>(n.first_label + n.classes.size());
        n.classes.push_back(cls);
      }
      n.dir_labels.push_back(it->second);
    }
  } else if (flags & format::kSegmentLabelled) {
    // .cls labels are the input's own: they never change, the class list only grows to hold them.
    n.labels = format::LabelSource::kInput;
    n.classes = ClsClassNames(static_cast<int32_t>(n.first_label), files.max_label());
  }
  return n;
}

// Of the addition's paths, those `base` holds: at most `limit` of them, and how many.
Result<std::vector<std::string>> PathsHeld(const format::SegmentBuilder& files,
                                           const VersionView& base, size_t limit, uint64_t* count) {
  // Keys go to the lookup in sorted batches, so each block of the base is read about once per
  // batch and memory stays bounded.
  constexpr size_t kBatch = 1 << 16;
  std::vector<std::string> batch, found;
  *count = 0;
  const auto check = [&]() -> Status {
    STOKER_ASSIGN_OR_RETURN(auto held, base.Holding(batch));
    *count += held.size();
    for (auto& path : held) {
      if (found.size() < limit) found.push_back(std::move(path));
    }
    batch.clear();
    return Status::OK();
  };
  STOKER_RETURN_IF_ERROR(files.ForEachKey([&](std::string_view key) -> Status {
    batch.emplace_back(key);
    return batch.size() >= kBatch ? check() : Status::OK();
  }));
  if (!batch.empty()) STOKER_RETURN_IF_ERROR(check());
  return found;
}

}  // namespace

std::vector<std::string> ClsClassNames(int32_t first, int32_t max_label) {
  std::vector<std::string> names;
  for (int64_t k = first; k <= max_label; ++k) names.push_back(std::to_string(k));
  return names;
}

Result<PackSummary> PublishAddition(Storage& dst, Addition& add, PublishPolicy policy,
                                    WriterLease& lease, PackSummary summary,
                                    std::string* segment_path) {
  uint32_t classes_added = 0;
  std::optional<format::WrittenSegment> written;  // this attempt's segment
  VersionCommit commit;
  commit.prepare = [&](const std::optional<format::VersionRecord>& latest,
                       int attempt) -> Result<format::VersionRecord> {
    std::unique_ptr<VersionView> base;
    uint32_t flags = FirstFlags(add);
    if (latest) {
      if (policy == PublishPolicy::kFresh) {
        return Err(Status::AlreadyExists(
            attempt == 1
                ? fmt::format("{} already holds a dataset (version {}); use --append to add "
                              "files to it",
                              dst.Describe(""), latest->version)
                : fmt::format("another writer created a dataset at {} at the same time; use "
                              "--append to add to it",
                              dst.Describe(""))));
      }
      STOKER_ASSIGN_OR_RETURN(base, VersionView::Open(dst, *latest));
      flags = latest->flags;
      STOKER_RETURN_IF_ERROR(CheckCompatible(add, flags));
      STOKER_RETURN_IF_ERROR(CheckSameColumns(latest->columns, add.columns));
      uint64_t taken = 0;
      STOKER_ASSIGN_OR_RETURN(auto examples, PathsHeld(*add.files, *base, 5, &taken));
      if (taken > 0) {
        std::string list;
        for (const std::string& path : examples) list += "\n  " + path;
        return Err(Status::InvalidArgument(
            fmt::format("{} of the input's paths are already in the dataset (version {}), e.g.:{}",
                        taken, latest->version, list)));
      }
    } else if (policy == PublishPolicy::kAppend) {
      return Err(
          Status::NotFound(fmt::format("--append: {} holds no dataset yet", dst.Describe(""))));
    }
    // Numbered after `latest`: a segment written for a version another writer took is dropped.
    const format::SegmentNumbering numbering = Number(*add.files, base.get(), flags);
    classes_added = static_cast<uint32_t>(numbering.classes.size());
    STOKER_ASSIGN_OR_RETURN(written, format::WriteSegment(dst, [&](format::SegmentSink& sink) {
                              return add.files->Write(numbering, sink);
                            }));
    *segment_path = written->path;
    format::VersionRecord record = latest ? *latest : format::VersionRecord{};
    record.version = latest ? latest->version + 1 : 1;
    record.parent = latest ? latest->version : 0;
    record.created_unix_seconds = static_cast<uint64_t>(std::time(nullptr));
    record.writer = lease.writer();
    record.flags = flags;
    record.columns = add.columns;
    format::AppendSegment(record, *written);
    // gc holds back this writer's chunks while its lease stands (checked by CommitVersion right
    // before the offer); never publish a version that names a chunk gone anyway.
    for (const auto& chunk : add.files->chunks()) {
      STOKER_ASSIGN_OR_RETURN(const bool exists, dst.Exists(format::ChunkPath(chunk.id)));
      if (!exists) {
        return Err(Status::NotFound(fmt::format(
            "{} of this pack was removed before the pack could publish (by a `stoker gc`?); "
            "nothing was published",
            dst.Describe(format::ChunkPath(chunk.id)))));
      }
    }
    return record;
  };
  commit.abandon = [&](bool) {
    if (written) (void)dst.Remove(written->path);
    written.reset();
    segment_path->clear();
  };
  STOKER_ASSIGN_OR_RETURN(const Committed committed, CommitVersion(dst, lease, commit));
  if (!written) return Err(Status::Internal("published without a segment"));  // prepare wrote it
  const format::VersionRecord& record = committed.record;
  summary.version = record.version;
  summary.files_total = record.files;
  summary.bytes_total = record.bytes;
  summary.chunks_added = written->segment->info().chunk_count;
  summary.chunks_total = record.chunks;
  summary.segment_bytes = written->bytes;
  for (const auto& ref : record.segments) summary.metadata_bytes += ref.bytes;
  summary.segments = record.segments.size();
  summary.classes = static_cast<uint32_t>(record.classes);
  summary.classes_added = classes_added;
  summary.samples = record.samples;
  summary.publish_attempts = committed.attempts;
  return summary;
}

}  // namespace stoker::dataset
