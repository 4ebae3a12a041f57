// The protocol that makes dataset versions appear atomically (format 1, docs/format.md §A.5):
// chunks and snapshot are written and synced first; then MANIFEST.tmp is written, synced and
// renamed over MANIFEST, and the directory is synced. Readers go MANIFEST → snapshot → chunks.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "format/manifest.h"
#include "format/snapshot.h"
#include "stoker/storage.h"

namespace stoker::dataset {

inline constexpr std::string_view kChunksDir = "chunks";
inline constexpr std::string_view kSnapshotsDir = "snapshots";

// "snapshots/0000000000000003.snap"
std::string SnapshotPath(uint64_t version);

// The manifest of the current version; nullopt if the location holds no dataset yet.
Result<std::optional<format::Manifest>> ReadCurrentVersion(Storage& storage);

// Maps and validates the snapshot a manifest names (size and CRC must match the manifest).
Result<std::unique_ptr<format::Snapshot>> OpenSnapshot(Storage& storage,
                                                       const format::Manifest& manifest,
                                                       bool verify_checksum);

// Writes the snapshot bytes for `version`, syncs them, then atomically points MANIFEST at it.
// The chunks it references must already be durable.
Status PublishVersion(Storage& storage, uint64_t version, std::string_view snapshot_bytes);

}  // namespace stoker::dataset
