#include "dataset/format1.h"

#include <fmt/format.h>

#include "common/coding.h"
#include "common/crc32c.h"
#include "storage/small_file.h"

namespace stoker::dataset {

std::string SnapshotPath(uint64_t version) {
  return fmt::format("{}/{:016x}.snap", kSnapshotsDir, version);
}

Result<std::optional<format::Manifest>> ReadFormat1Manifest(Storage& storage) {
  auto text = storage::ReadSmallFile(storage, format::kManifestPath, format::kMaxManifestSize);
  if (!text) {
    if (text.error().IsNotFound()) return std::optional<format::Manifest>();
    return Err(text.error());
  }
  auto manifest = format::ParseManifest(*text);
  if (!manifest) return Err(manifest.error().WithContext(storage.Describe("")));
  return std::optional<format::Manifest>(std::move(*manifest));
}

Result<std::unique_ptr<format::Snapshot>> OpenSnapshot(Storage& storage,
                                                       const format::Manifest& manifest,
                                                       bool verify_checksum) {
  const std::string name = storage.Describe(manifest.snapshot_path);
  // The size before the bytes: mapping (or, remotely, reading) a file of the wrong size — a
  // sparse terabyte — would cost its size before the check.
  STOKER_ASSIGN_OR_RETURN(auto file, storage.OpenRead(manifest.snapshot_path));
  if (file->Size() != manifest.snapshot_bytes) {
    return Err(Status::Corruption(fmt::format("snapshot {}: {} bytes, MANIFEST says {}", name,
                                              file->Size(), manifest.snapshot_bytes)));
  }
  STOKER_ASSIGN_OR_RETURN(auto bytes, storage.Map(manifest.snapshot_path));
  const auto data = bytes->bytes();
  if (data.size() != manifest.snapshot_bytes) {  // replaced in between
    return Err(Status::Corruption(fmt::format("snapshot {}: {} bytes, MANIFEST says {}", name,
                                              data.size(), manifest.snapshot_bytes)));
  }
  // The snapshot's trailer holds the CRC of everything before it; MANIFEST repeats it, so a
  // snapshot swapped for another valid one is caught too.
  if (data.size() >= 12 &&
      coding::DecodeFixed<uint32_t>(data.data() + data.size() - 8) != manifest.snapshot_crc32c) {
    return Err(Status::Corruption(
        fmt::format("snapshot {}: CRC32C differs from the one in MANIFEST", name)));
  }
  format::SnapshotOpenOptions options;
  options.verify_checksum = verify_checksum;
  STOKER_ASSIGN_OR_RETURN(auto snapshot, format::Snapshot::Open(std::move(bytes), name, options));
  if (snapshot->dataset_version() != manifest.version) {
    return Err(Status::Corruption(fmt::format("snapshot {}: version {}, MANIFEST says {}", name,
                                              snapshot->dataset_version(), manifest.version)));
  }
  return snapshot;
}

Status PublishFormat1Version(Storage& storage, uint64_t version, std::string_view snapshot_bytes) {
  const std::string snapshot_path = SnapshotPath(version);
  STOKER_RETURN_IF_ERROR(storage.CreateDirs(kSnapshotsDir));
  STOKER_RETURN_IF_ERROR(storage::WriteSmallFile(storage, snapshot_path, snapshot_bytes));
  STOKER_RETURN_IF_ERROR(storage.SyncDir(kSnapshotsDir));
  format::Manifest manifest;
  manifest.version = version;
  manifest.snapshot_path = snapshot_path;
  manifest.snapshot_bytes = snapshot_bytes.size();
  manifest.snapshot_crc32c =
      coding::DecodeFixed<uint32_t>(snapshot_bytes.data() + snapshot_bytes.size() - 8);
  const std::string tmp = std::string(format::kManifestPath) + ".tmp";
  STOKER_RETURN_IF_ERROR(storage::WriteSmallFile(storage, tmp, format::EncodeManifest(manifest)));
  STOKER_RETURN_IF_ERROR(storage.Rename(tmp, format::kManifestPath));
  return storage.SyncDir("");
}

}  // namespace stoker::dataset
