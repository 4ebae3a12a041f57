// MANIFEST: the tiny text file naming a dataset's current snapshot (docs/format.md §A.4).
// Publishing a version = write chunks and snapshot, sync them, then atomically replace this
// file; readers that open MANIFEST therefore see a complete version or the previous one.
//
//   stoker-manifest 1
//   version 3
//   snapshot snapshots/0000000000000003-5f0c9a1e.snap
//   snapshot-bytes 123456
//   snapshot-crc32c 1a2b3c4d
//   manifest-crc32c 9e8d7c6b        (CRC32C of all the bytes before this line)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "stoker/status.h"

namespace stoker::format {

inline constexpr std::string_view kManifestPath = "MANIFEST";
inline constexpr uint64_t kMaxManifestSize = 4096;

struct Manifest {
  uint64_t version = 0;
  std::string snapshot_path;  // relative to the dataset root
  uint64_t snapshot_bytes = 0;
  uint32_t snapshot_crc32c = 0;
};

std::string EncodeManifest(const Manifest& m);
// Strict: exact field order, lowercase hex, decimal without leading zeros, a final newline and
// a matching CRC; snapshot_path must be "snapshots/<name>" with a safe name.
Result<Manifest> ParseManifest(std::string_view text);

}  // namespace stoker::format
