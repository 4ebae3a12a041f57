// The versions of a format-2 dataset (docs/format.md §4-5): `versions/<v>.version` records,
// each created exclusively, so that publishing version v is a compare-and-swap that exactly one
// writer wins. Listing them is the only way to find the newest version: there is no pointer
// file that a crashed or racing writer could leave stale.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "format/version_record.h"
#include "stoker/storage.h"

namespace stoker::format {

// Published versions, ascending; empty if the location holds none.
Result<std::vector<uint64_t>> ListVersions(Storage& storage);

// The record of version `version` (NotFound if it was never published or was collected).
Result<VersionRecord> ReadVersion(Storage& storage, uint64_t version);

// The newest version's record; nullopt if there is none.
Result<std::optional<VersionRecord>> ReadLatestVersion(Storage& storage);

// Publishes `record` as version record.version, unless that version exists: then
// AlreadyExists, and the caller rebases on the newer version and tries again. A reply lost on
// the way (a network error after the store created the record) is resolved by reading the
// record back: if it holds exactly these bytes, this writer won.
Status PublishVersionRecord(Storage& storage, const VersionRecord& record);

}  // namespace stoker::format
