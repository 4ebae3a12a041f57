// `stoker verify`: re-reads the newest version's metadata and every chunk and checks every
// CRC32C (version record, every segment block, chunk header/index/data, every file), naming
// each corrupt file and chunk.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "stoker/storage.h"

namespace stoker::dataset {

// Something corrupt: the file or chunk (its path in the dataset) and what is wrong with it.
struct Finding {
  std::string path;
  std::string message;
  std::string ToString() const { return path + ": " + message; }
  bool operator==(const Finding&) const = default;
};

struct VerifyReport {
  uint64_t version = 0;
  uint64_t files_checked = 0, chunks_checked = 0, bytes_checked = 0;
  std::vector<std::string> problems;    // metadata level: nothing else was checked
  std::vector<Finding> corrupt_chunks;  // path "chunks/….chunk"
  std::vector<Finding> corrupt_files;   // path: the file's in the dataset
  bool ok() const { return problems.empty() && corrupt_chunks.empty() && corrupt_files.empty(); }
};

// Called after each chunk with (chunks done, chunk count, bytes done).
using VerifyProgress = std::function<void(uint64_t, uint64_t, uint64_t)>;

// Checks `version` (the newest if unset). Fails only if the storage cannot be reached, denies a
// read (PermissionDenied, naming the file) or the version does not exist; corruption is
// reported in the report.
Result<VerifyReport> Verify(Storage& storage, const VerifyProgress& progress = {},
                            std::optional<uint64_t> version = std::nullopt);

}  // namespace stoker::dataset
