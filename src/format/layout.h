// The directories of a dataset (docs/format.md §2), named once: every writer, reader and gc
// builds its paths from these.
#pragma once

#include <string_view>

namespace stoker::format {

inline constexpr std::string_view kChunksDir = "chunks";        // NNNN.chunk: sample bytes
inline constexpr std::string_view kSegmentsDir = "segments";    // NNNN.seg: metadata segments
inline constexpr std::string_view kVersionsDir = "versions";    // NNNN.version: version records
inline constexpr std::string_view kPartsDir = "parts";          // parallel packs' unpublished parts
inline constexpr std::string_view kGcDir = "gc";                // gc's state and writers' leases
inline constexpr std::string_view kWritersDir = "gc/writers";   // one lease per live writer
inline constexpr std::string_view kSnapshotsDir = "snapshots";  // format 1 only (dataset/format1.h)

}  // namespace stoker::format
