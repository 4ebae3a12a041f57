// A Storage for power-loss tests (as LevelDB's fault_injection_test and RocksDB's
// FaultInjectionTestFS): an in-memory file system that also keeps what would survive if the
// machine lost power now. A `kill -9` keeps the page cache, so a missing Sync() or directory
// sync passes every test that only kills processes; this one drops what was never made durable.
//
// What is durable, as POSIX promises it (and no more):
//   - a file's bytes up to its last WritableFile::Sync(); later appends are lost;
//   - a name in a directory (a file created, renamed there or removed) once SyncDir(directory)
//     ran after the change: until then the directory holds its earlier entry, or none;
//   - CreateExclusive's file, whole (its contract: durably and atomically);
//   - directories themselves (CreateDirs), at once (stoker's writers create only fixed ones).
// Creating over an existing name truncates that same file: the old bytes stay durable until
// the next Sync.
//
// PowerLoss() drops everything else: every name and byte returns to its durable state. A crash
// point stops the world first: CrashAfter(n) lets n more mutating calls through (Create, Append,
// Sync, Close, Rename, CreateExclusive, Remove, CreateDirs, SyncDir); every call after those,
// reading or writing, fails with IOError "power lost" and changes nothing, as if the machine
// had stopped there. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "stoker/storage.h"

namespace stoker::storage {

class PowerLossStorage final : public Storage {
 public:
  PowerLossStorage();
  ~PowerLossStorage() override;

  Result<std::unique_ptr<RandomAccessFile>> OpenRead(std::string_view path) override;
  Result<std::unique_ptr<WritableFile>> Create(std::string_view path) override;
  Result<std::shared_ptr<const FileBytes>> Map(std::string_view path) override;
  Status Rename(std::string_view from, std::string_view to) override;
  Status CreateExclusive(std::string_view path, std::span<const std::byte> bytes) override;
  Status Remove(std::string_view path) override;
  Status CreateDirs(std::string_view path) override;
  Status SyncDir(std::string_view path) override;
  Result<std::vector<std::string>> List(std::string_view path) override;
  Result<bool> Exists(std::string_view path) override;
  std::string Describe(std::string_view path) const override;

  // Mutating calls so far (what a crash point counts).
  uint64_t mutations() const;
  // After `n` more mutating calls, every call fails and changes nothing.
  void CrashAfter(uint64_t n);
  // Power comes back: names and bytes return to their durable state, calls work again.
  // `flushed(dir)`: directories whose unsynced changes reached the disk anyway (a file system
  // may write back any directory before its sync): their names are as they were at the crash.
  // POSIX orders nothing between directories without a sync, so a writer that needs one
  // change durable before another (a version record gone before the files it names) must sync
  // in between; flushing some directories and not others is how a test asks.
  void PowerLoss(const std::function<bool(std::string_view dir)>& flushed = {});

  struct State;  // shared with the file objects handed out

 private:
  std::shared_ptr<State> state_;
};

}  // namespace stoker::storage
