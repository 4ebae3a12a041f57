// Format 1 (docs/format.md appendix A), which stoker still reads and `stoker upgrade` converts:
// one snapshot per version, and a MANIFEST pointing at the current one. Chunks and snapshot are
// written and synced first; then MANIFEST.tmp is written, synced and renamed over MANIFEST, and
// the directory is synced. Readers go MANIFEST → snapshot → chunks. (Format 2, what every
// writer writes today, publishes through dataset/commit_version.h.)
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "format/layout.h"
#include "format/manifest.h"
#include "format/snapshot.h"
#include "stoker/storage.h"

namespace stoker::dataset {

using format::kChunksDir;
using format::kSnapshotsDir;

// "snapshots/0000000000000003.snap"
std::string SnapshotPath(uint64_t version);

// The MANIFEST of a format-1 dataset; nullopt if the location holds none.
Result<std::optional<format::Manifest>> ReadFormat1Manifest(Storage& storage);

// Maps and validates the snapshot a manifest names (size and CRC must match the manifest).
Result<std::unique_ptr<format::Snapshot>> OpenSnapshot(Storage& storage,
                                                       const format::Manifest& manifest,
                                                       bool verify_checksum);

// Writes the snapshot bytes for `version`, syncs them, then atomically points MANIFEST at it.
// The chunks it references must already be durable. (Tests and benchmarks make format-1
// datasets with it; no command writes format 1.)
Status PublishFormat1Version(Storage& storage, uint64_t version, std::string_view snapshot_bytes);

}  // namespace stoker::dataset
