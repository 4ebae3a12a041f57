// Publishing what a writer adds (docs/format.md §5): the segment of its files is numbered after
// the newest version and offered as the next version; a writer that loses that version to
// another rebases (re-reads the newest version, checks its paths are still new, renumbers) and
// tries again. Shared by `stoker pack` and `stoker commit`.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dataset/packer.h"
#include "dataset/writer_lease.h"
#include "format/segment_builder.h"
#include "stoker/storage.h"

namespace stoker::dataset {

// What one writer adds, before it is numbered after the version it extends.
struct Addition {
  // Its files (labels: from .cls members for tar input, else -1) and chunks, sealed; numbered
  // anew on each attempt to publish.
  std::unique_ptr<format::SegmentBuilder> files;
  bool group_samples = false;  // samples group by key (WebDataset)
  std::string columns;         // a column dataset's schema (PackOptions::columns)
  LabelPolicy labels = LabelPolicy::kAuto;
  bool any_cls_label() const { return files->max_label() >= 0; }
};

// The largest label a .cls member may hold. Labels of .cls members name classes "0" .. max, so
// the class list follows the largest label: the limit keeps one hostile member from asking for
// billions of classes (~300 MB of class names at the limit; 4.2 M classes is above the largest
// labelled datasets, face identities at ~4 M).
inline constexpr int32_t kMaxClsLabel = (1 << 22) - 1;

// The class names of .cls labels `first` .. `max_label`: "first", ..., "max_label".
std::vector<std::string> ClsClassNames(int32_t first, int32_t max_label);

enum class PublishPolicy : uint8_t {
  kFresh,   // the first version: AlreadyExists if the dataset exists (or appears meanwhile)
  kAppend,  // the next version: NotFound if there is no dataset
  kEither,  // the first version or the next one (`stoker commit`)
};

// OK if an addition with schema `theirs` (empty: not a column dataset) may extend a dataset
// whose schema is `ours`; else InvalidArgument saying how they differ.
Status CheckSameColumns(std::string_view ours, std::string_view theirs);

// Publishes `add` as a new version. `summary` comes back completed. *segment_path: the path of
// the segment once written (so a failed writer can tell whether a version lists it). `lease`
// (taken before the addition's chunks were written) is checked right before each publish.
Result<PackSummary> PublishAddition(Storage& dst, Addition& add, PublishPolicy policy,
                                    WriterLease& lease, PackSummary summary,
                                    std::string* segment_path);

}  // namespace stoker::dataset
