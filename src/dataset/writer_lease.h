// A writer's lease (docs/format.md §6): what tells `stoker gc` that a writer is at work, so
// that gc never deletes the chunks and segment it has written but not yet published, whatever
// the grace period.
//
// A writer (pack, commit, compact, upgrade) takes a lease before it writes any file: it creates
// gc/writers/<id>.lease and rewrites it every kLeaseHeartbeat (its content changes each time).
// gc holds back every unreferenced file it first saw while a lease was live until that lease is
// gone. A lease whose content gc has seen unchanged for gc's --writer-timeout (10 min by
// default) belongs to a writer that died or froze: gc removes it, and its files are then
// treated like any other unreferenced file. A writer checks its lease right before it publishes
// (Check) and fails, publishing nothing, if gc has expired it.
// Thread-safety: Check may be called from any thread; the heartbeat runs on a thread of its own.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "format/layout.h"
#include "stoker/storage.h"

namespace stoker::dataset {

using format::kWritersDir;
inline constexpr std::chrono::seconds kLeaseHeartbeat{30};

// "gc/writers/00000000000000ab.lease"; the writer id of such a name (nullopt for other names).
std::string LeasePath(uint64_t writer);
std::optional<uint64_t> WriterOfLeaseName(std::string_view name);

// The process that holds a lease, as its lease names it (docs/format.md §6): its host, the
// kernel's boot id and PID namespace, its pid and start time. A gc on the same machine, in the
// same PID namespace and boot, can then tell at once that the writer is gone (killed, crashed)
// instead of waiting out the writer timeout; anywhere else the timeout decides.
struct LeaseHolder {
  std::string host, boot, pid_namespace;
  uint64_t pid = 0, start = 0;  // start: /proc/<pid>/stat's starttime (clock ticks since boot)
};
LeaseHolder ThisProcess();
// The holder a lease's text names; nullopt for a lease that names none (older writers).
std::optional<LeaseHolder> ParseLeaseHolder(std::string_view lease_text);
// True only when `holder` is certainly gone: it ran on this machine, in this boot and PID
// namespace, and no process with its pid and start time runs now.
bool HolderIsGone(const LeaseHolder& holder);

class WriterLease {
 public:
  // Creates the lease in `storage` (which must outlive it) and starts its heartbeat.
  static Result<std::unique_ptr<WriterLease>> Take(
      Storage& storage, std::chrono::milliseconds heartbeat = kLeaseHeartbeat);
  ~WriterLease();  // stops the heartbeat and removes the lease (best effort)
  WriterLease(const WriterLease&) = delete;
  WriterLease& operator=(const WriterLease&) = delete;

  uint64_t writer() const { return writer_; }
  const std::string& path() const { return path_; }

  // OK while the lease stands; NotFound, saying what happened, once gc has expired it (then
  // gc may have removed this writer's files: it must publish nothing).
  Status Check();

 private:
  WriterLease(Storage& storage, uint64_t writer, std::chrono::milliseconds heartbeat);
  Status Write(uint64_t beat);
  void Beat();

  Storage& storage_;
  const uint64_t writer_;
  const std::string path_;
  const std::chrono::milliseconds heartbeat_;
  const LeaseHolder holder_;  // this process, named in every beat
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;  // guarded by mu_
  bool lost_ = false;      // guarded by mu_: the lease was gone at a heartbeat
  std::thread thread_;
};

}  // namespace stoker::dataset
