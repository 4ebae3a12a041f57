// A Storage wrapper that injects faults, for tests of everything above storage: read errors,
// short reads, flipped bits, delays, and write/sync failures. Faults apply to paths containing
// `path_filter` and fire with the given probability from a seeded generator, so a failing test
// replays exactly. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "stoker/storage.h"
#include "storage/forwarding_storage.h"

namespace stoker::storage {

struct FaultOptions {
  std::string path_filter;             // empty: every path
  double read_error_probability = 0;   // ReadAt/Map fail with IOError
  double short_read_probability = 0;   // ReadAt reports a short read (an IOError)
  double bit_flip_probability = 0;     // ReadAt/Map succeed but one bit of the result is flipped
  double write_error_probability = 0;  // Append/Sync/Rename/CreateExclusive fail with IOError
  // CreateExclusive succeeds but reports an IOError, as when a network reply is lost: the
  // caller cannot tell whether its file exists.
  double lost_reply_probability = 0;
  std::chrono::microseconds read_delay{0};
  uint64_t seed = 1;
};

class FaultStorage final : public ForwardingStorage {
 public:
  FaultStorage(std::shared_ptr<Storage> base, FaultOptions options);
  ~FaultStorage() override;

  Result<std::unique_ptr<RandomAccessFile>> OpenRead(std::string_view path) override;
  Result<std::unique_ptr<WritableFile>> Create(std::string_view path) override;
  Result<std::shared_ptr<const FileBytes>> Map(std::string_view path) override;
  Status Rename(std::string_view from, std::string_view to) override;
  Status CreateExclusive(std::string_view path, std::span<const std::byte> bytes) override;

  // How many faults of each kind have fired so far.
  struct Counters {
    uint64_t read_errors = 0, short_reads = 0, bit_flips = 0, write_errors = 0, lost_replies = 0;
  };
  Counters counters() const;

  struct Injector;  // shared with the file wrappers it hands out

 private:
  std::shared_ptr<Injector> injector_;
};

}  // namespace stoker::storage
