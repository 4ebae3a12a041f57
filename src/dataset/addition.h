// Publishing what a writer adds (docs/format.md §5): the segment of its files is numbered after
// the newest version and offered as the next version; a writer that loses that version to
// another rebases (re-reads the newest version, checks its paths are still new, renumbers) and
// tries again. Shared by `stoker pack` and `stoker commit`.
#pragma once

#include <memory>
#include <string>

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
  LabelPolicy labels = LabelPolicy::kAuto;
  bool any_cls_label() const { return files->max_label() >= 0; }
};

enum class PublishPolicy : uint8_t {
  kFresh,   // the first version: AlreadyExists if the dataset exists (or appears meanwhile)
  kAppend,  // the next version: NotFound if there is no dataset
  kEither,  // the first version or the next one (`stoker commit`)
};

// Publishes `add` as a new version. `summary` comes back completed. *segment_path: the path of
// the segment once written (so a failed writer can tell whether a version lists it). `lease`
// (taken before the addition's chunks were written) is checked right before each publish.
Result<PackSummary> PublishAddition(Storage& dst, Addition& add, PublishPolicy policy,
                                    WriterLease& lease, PackSummary summary,
                                    std::string* segment_path);

}  // namespace stoker::dataset
