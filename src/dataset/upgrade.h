// `stoker upgrade`: converts a format-1 dataset (MANIFEST + one snapshot) in place to format 2
// (docs/format.md), keeping its chunk files: one segment describing the current version's files,
// published as the same version number. MANIFEST and snapshots/ are left for readers of older
// stoker releases; nothing of theirs is modified.
#pragma once

#include <cstdint>

#include "stoker/storage.h"

namespace stoker::dataset {

struct UpgradeSummary {
  uint64_t version = 0;
  uint64_t files = 0, chunks = 0, classes = 0;
  uint64_t segment_bytes = 0;
  // Format 1 numbered files breadth-first by directory, format 2 by path: the same for an
  // ImageFolder tree (class/file), different where files sit at several depths.
  bool indices_preserved = true;
};

// AlreadyExists if the location already holds format-2 versions; NotFound if it holds no
// dataset. The snapshot is fully verified first; a damaged one stops the upgrade (Corruption).
Result<UpgradeSummary> Upgrade(Storage& storage);

}  // namespace stoker::dataset
