// Storage for s3://bucket/prefix URIs (S3, Ceph RGW, MinIO …) over S3Client.
//
// Reads: OpenRead HEADs the object for its size, ReadAt is one ranged GET (many run in
// parallel on kept-alive connections). Writes: a WritableFile buffers and PUTs on Close, or
// switches to a multipart upload once it holds more than one part (16 MiB), so large chunks
// stream; an upload that is not closed is aborted, never completed. CreateExclusive is a
// conditional PUT (If-None-Match: *), the compare-and-swap versions are published with. Rename is a
// server-side copy then a delete: the destination appears whole or not at all (gc rewrites its
// pending list so). Directories are key prefixes:
// CreateDirs and SyncDir do nothing. Thread-safe.
#pragma once

#include <memory>
#include <string_view>

#include "s3/s3_client.h"
#include "stoker/storage.h"

namespace stoker::s3 {

inline constexpr uint64_t kPartBytes = 16ull << 20;

// What OpenStorage opens an s3:// URI with: the options' keys, endpoint and region, and for what
// they leave unset the environment and ~/.aws (s3_config.h).
Result<std::shared_ptr<Storage>> OpenS3Storage(std::string_view uri, const StorageOptions& options);
std::shared_ptr<Storage> NewS3Storage(std::shared_ptr<S3Client> client, S3Location location);

}  // namespace stoker::s3
