#include "dataset/addition.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>

#include "common/random.h"
#include "common/unique_id.h"
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
  uint32_t flags = add.tar_input ? format::kSegmentGrouped : 0;
  if (add.labels == LabelPolicy::kNone) return flags;
  if (add.tar_input) return add.any_cls_label ? flags | format::kSegmentLabelled : flags;
  const bool all_in_dirs =
      !add.spec.files.empty() &&
      std::all_of(add.spec.files.begin(), add.spec.files.end(), [](const auto& f) {
        return f.path.find('/') != std::string::npos;
      });
  return all_in_dirs ? flags | format::kSegmentLabelled | format::kSegmentLabelsFromDirs : flags;
}

// Checks that the addition fits the dataset it extends (same kind of input and labels).
Status CheckCompatible(const Addition& add, uint32_t flags) {
  if (((flags & format::kSegmentGrouped) != 0) != add.tar_input) {
    return Status::InvalidArgument(
        "cannot append a directory tree to a dataset packed from tar shards, or vice versa");
  }
  if (flags & format::kSegmentLabelsFromDirs) {
    for (const auto& f : add.spec.files) {
      if (f.path.find('/') == std::string::npos) {
        return Status::InvalidArgument(fmt::format(
            "{} is outside a class directory, but the dataset's labels are its first-level "
            "directories",
            f.path));
      }
    }
  } else if (add.any_cls_label && !(flags & format::kSegmentLabelled)) {
    return Status::InvalidArgument(
        "the input carries .cls labels but the dataset has none; pass --labels none to add it "
        "without them");
  }
  return Status::OK();
}

// Numbers `spec` (holding the addition's files) after `base` (nullptr: the first version):
// file, sample and class numbers continue where the base's end; a class directory seen before
// keeps its label. Done again on every attempt, since another writer may have published first.
void Number(format::SegmentSpec& spec, const VersionView* base, uint32_t flags) {
  spec.flags = flags;
  spec.first_file = base ? base->record().files : 0;
  spec.first_sample = base ? base->record().samples : 0;
  spec.first_label = base ? base->class_count() : 0;
  spec.classes.clear();
  if (flags & format::kSegmentLabelsFromDirs) {
    std::unordered_map<std::string_view, int32_t> label_of;
    if (base) {
      for (uint32_t k = 0; k < base->class_count(); ++k) label_of[base->class_name(k)] = k;
    }
    std::vector<std::string_view> added;
    for (const auto& f : spec.files) {
      const std::string_view cls = std::string_view(f.path).substr(0, f.path.find('/'));
      if (label_of.try_emplace(cls, -1).second) added.push_back(cls);
    }
    std::sort(added.begin(), added.end());  // new classes in name order, after the old ones
    for (const std::string_view cls : added) {
      label_of[cls] = static_cast<int32_t>(spec.first_label + spec.classes.size());
      spec.classes.emplace_back(cls);
    }
    for (auto& f : spec.files) {
      f.label = label_of.at(std::string_view(f.path).substr(0, f.path.find('/')));
    }
  } else if (flags & format::kSegmentLabelled) {
    // .cls labels are the input's own: they never change, the class list only grows to hold them.
    int32_t max_label = -1;
    for (const auto& f : spec.files) max_label = std::max(max_label, f.label);
    for (int64_t k = spec.first_label; k <= max_label; ++k) spec.classes.push_back(std::to_string(k));
  } else {
    for (auto& f : spec.files) f.label = format::kNoLabel;
  }
}

// Publishing can be retried: a writer that loses version v to another rebases on it.
constexpr int kMaxPublishAttempts = 1000;

}  // namespace

Result<PackSummary> PublishAddition(Storage& dst, Addition& add, PublishPolicy policy,
                                    PackSummary summary, std::string* segment_path) {
  const uint64_t writer = UniqueId();
  std::vector<std::string> keys;  // sorted, for the conflict checks
  keys.reserve(add.spec.files.size());
  for (const auto& f : add.spec.files) keys.push_back(format::FileKeyOf(f.path));
  std::sort(keys.begin(), keys.end());
  Pcg32 jitter(writer);
  for (int attempt = 0;; ++attempt) {
    STOKER_ASSIGN_OR_RETURN(auto latest, format::ReadLatestVersion(dst));
    std::unique_ptr<VersionView> base;
    uint32_t flags = FirstFlags(add);
    if (latest) {
      if (policy == PublishPolicy::kFresh) {
        return Err(Status::AlreadyExists(fmt::format(
            "{} {} a dataset (version {}); use --append to add files to it", dst.Describe(""),
            attempt == 0 ? "already holds" : "was given", latest->version)));
      }
      STOKER_ASSIGN_OR_RETURN(base, VersionView::Open(dst, *latest));
      flags = latest->flags;
      STOKER_RETURN_IF_ERROR(CheckCompatible(add, flags));
      STOKER_ASSIGN_OR_RETURN(auto taken, base->Holding(keys));
      if (!taken.empty()) {
        std::string list;
        for (size_t i = 0; i < std::min<size_t>(taken.size(), 5); ++i) list += "\n  " + taken[i];
        return Err(Status::InvalidArgument(fmt::format(
            "{} of the input's paths are already in the dataset (version {}), e.g.:{}",
            taken.size(), latest->version, list)));
      }
    } else if (policy == PublishPolicy::kAppend) {
      return Err(Status::NotFound(fmt::format("--append: {} holds no dataset yet", dst.Describe(""))));
    }
    format::SegmentSpec& spec = add.spec;
    Number(spec, base.get(), flags);
    const uint32_t classes_added = static_cast<uint32_t>(spec.classes.size());
    STOKER_ASSIGN_OR_RETURN(std::string bytes, format::BuildSegment(spec));
    STOKER_ASSIGN_OR_RETURN(auto written, format::WriteSegment(dst, bytes));
    *segment_path = written.path;
    format::VersionRecord record = latest ? *latest : format::VersionRecord{};
    record.version = latest ? latest->version + 1 : 1;
    record.parent = latest ? latest->version : 0;
    record.created_unix_seconds = static_cast<uint64_t>(std::time(nullptr));
    record.writer = writer;
    record.flags = flags;
    format::AppendSegment(record, written);
    // A pack that outlived `stoker gc`'s grace period may have lost chunks to it: never publish
    // a version that names a missing chunk.
    for (const auto& chunk : spec.chunks) {
      STOKER_ASSIGN_OR_RETURN(const bool exists, dst.Exists(format::ChunkPath(chunk.id)));
      if (!exists) {
        return Err(Status::NotFound(fmt::format(
            "{} of this pack was removed before the pack could publish (by a `stoker gc` whose "
            "grace period is shorter than the pack took?); nothing was published",
            dst.Describe(format::ChunkPath(chunk.id)))));
      }
    }
    const Status published = format::PublishVersionRecord(dst, record);
    if (published.ok()) {
      summary.version = record.version;
      summary.files_total = record.files;
      summary.bytes_total = record.bytes;
      summary.chunks_added = written.segment->info().chunk_count;
      summary.chunks_total = record.chunks;
      summary.segment_bytes = bytes.size();
      for (const auto& ref : record.segments) summary.metadata_bytes += ref.bytes;
      summary.segments = record.segments.size();
      summary.classes = static_cast<uint32_t>(record.classes);
      summary.classes_added = classes_added;
      summary.samples = record.samples;
      summary.publish_attempts = attempt + 1;
      return summary;
    }
    if (published.code() != StatusCode::kAlreadyExists) return Err(published);
    // Another writer published this version first: this segment was numbered for a version
    // that will never list it. Drop it, rebase on the newer version and try again.
    (void)dst.Remove(*segment_path);
    segment_path->clear();
    if (policy == PublishPolicy::kFresh) {
      return Err(Status::AlreadyExists(fmt::format(
          "another writer created a dataset at {} at the same time; use --append to add to it",
          dst.Describe(""))));
    }
    if (attempt + 1 >= kMaxPublishAttempts) {
      return Err(published.WithContext(
          fmt::format("gave up after {} attempts to publish", kMaxPublishAttempts)));
    }
    // Backing off by a random few ms spreads writers that collided apart.
    std::this_thread::sleep_for(std::chrono::microseconds(
        jitter.Below(1000u << std::min(attempt, 8))));
  }
}


}  // namespace stoker::dataset
