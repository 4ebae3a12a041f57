// See pack_option_table.h. One entry per option: the accessors are captureless lambdas, so the
// whole table is data.
#include "dataset/pack_option_table.h"

#include <algorithm>
#include <limits>
#include <string>

#include <fmt/format.h>

namespace stoker::dataset {
namespace {

std::string LayoutName(DirectoryLayout layout) {
  switch (layout) {
    case DirectoryLayout::kAuto:
      return "auto";
    case DirectoryLayout::kTree:
      return "tree";
    case DirectoryLayout::kWebDataset:
      return "webdataset";
  }
  return "auto";
}

StorageOrder OrderOf(const PackSettings& s) {
  return s.pack.open_chunks == 1 ? StorageOrder::kInput : StorageOrder::kMixed;
}

const std::vector<PackOption>& Table() {
  static const std::vector<PackOption> table = {
      {"chunk_size",
       OptionKind::kByteSize,
       "target chunk file size: bytes, or text like 64MiB.",
       {},
       [](PackSettings& s, const OptionValue& v) -> Status {
         s.pack.chunk_bytes = std::get<uint64_t>(v);
         return Status::OK();
       },
       [](const PackSettings& s) { return OptionValue(s.pack.chunk_bytes); }},
      {"append",
       OptionKind::kBool,
       "add the files to the existing dataset as a new version (its chunks and indices kept).",
       {},
       [](PackSettings& s, const OptionValue& v) -> Status {
         s.pack.append = std::get<bool>(v);
         return Status::OK();
       },
       [](const PackSettings& s) { return OptionValue(s.pack.append); }},
      {"labels",
       OptionKind::kChoice,
       "auto: labels from the first directory level (files beside the class directories are "
       "left out, and said so), or from .cls members (tar, WebDataset); none: no labels.",
       {"auto", "none"},
       [](PackSettings& s, const OptionValue& v) -> Status {
         s.pack.labels =
             std::get<std::string>(v) == "none" ? LabelPolicy::kNone : LabelPolicy::kAuto;
         s.source.labels_from_dirs = s.pack.labels == LabelPolicy::kAuto;
         return Status::OK();
       },
       [](const PackSettings& s) {
         return OptionValue(std::string(s.pack.labels == LabelPolicy::kNone ? "none" : "auto"));
       }},
      {"threads",
       OptionKind::kUnsigned,
       "parallel file reads of a directory (0: the cores, at least 2; at most 1024).",
       {},
       [](PackSettings& s, const OptionValue& v) -> Status {
         // Each is a thread: tens of thousands fail to start (and std::thread aborts).
         const uint64_t n = std::get<uint64_t>(v);
         if (n > 1024) {
           return Status::InvalidArgument(fmt::format("threads must be at most 1024, not {}", n));
         }
         s.source.threads = int(n);
         return Status::OK();
       },
       [](const PackSettings& s) { return OptionValue(uint64_t(std::max(s.source.threads, 0))); }},
      {"order",
       OptionKind::kChoice,
       "where files land in chunks: shuffled (every chunk a random mix of the input, so "
       "chunk-wise shuffle mixes classes; tar input: 1024 chunks filled at once) or path "
       "(path or archive order: an ImageFolder tree class by class).",
       {"shuffled", "path"},
       [](PackSettings& s, const OptionValue& v) -> Status {
         STOKER_ASSIGN_OR_RETURN(const StorageOrder order,
                                 ParseStorageOrder(std::get<std::string>(v)));
         SetStorageOrder(order, s.pack.mix_seed, &s.source, &s.pack);
         return Status::OK();
       },
       [](const PackSettings& s) {
         return OptionValue(std::string(OrderOf(s) == StorageOrder::kInput ? "path" : "shuffled"));
       }},
      {"order_seed",
       OptionKind::kUnsigned,
       "the seed of the shuffled order.",
       {},
       [](PackSettings& s, const OptionValue& v) -> Status {
         SetStorageOrder(OrderOf(s), std::get<uint64_t>(v), &s.source, &s.pack);
         return Status::OK();
       },
       [](const PackSettings& s) { return OptionValue(s.pack.mix_seed); }},
      {"mix_memory",
       OptionKind::kByteSize,
       "tar input to S3, shuffled order: memory for the part buffers of the chunks filled at "
       "once (32 MiB each; 2GiB: 64 chunks, 8GiB: 256).",
       {},
       [](PackSettings& s, const OptionValue& v) -> Status {
         s.pack.mix_memory_bytes = std::get<uint64_t>(v);
         return Status::OK();
       },
       [](const PackSettings& s) { return OptionValue(s.pack.mix_memory_bytes); }},
      {"layout",
       OptionKind::kChoice,
       "a directory's samples: tree (a file each, labels from the first directory level), "
       "webdataset (files sharing a key form a sample labelled by its .cls, as in a tar), auto "
       "(webdataset when .cls members are there).",
       {"auto", "tree", "webdataset"},
       [](PackSettings& s, const OptionValue& v) -> Status {
         STOKER_ASSIGN_OR_RETURN(s.source.layout, ParseDirectoryLayout(std::get<std::string>(v)));
         return Status::OK();
       },
       [](const PackSettings& s) { return OptionValue(LayoutName(s.source.layout)); }},
      {"exclude",
       OptionKind::kTexts,
       "leave out files and directories whose name or path in the source matches this glob "
       "(repeatable: --exclude '*.txt' --exclude 'tmp/*'); the usual OS litter (.DS_Store, "
       "._*, __MACOSX, Thumbs.db, desktop.ini) always is. The summary says what was left out.",
       {},
       [](PackSettings& s, const OptionValue& v) -> Status {
         s.source.exclude = std::get<std::vector<std::string>>(v);
         return Status::OK();
       },
       [](const PackSettings& s) { return OptionValue(s.source.exclude); }},
  };
  return table;
}

}  // namespace

std::span<const PackOption> PackOptionTable() { return Table(); }

const PackOption* FindPackOption(std::string_view name) {
  return FindOption(PackOptionTable(), name);
}

}  // namespace stoker::dataset
