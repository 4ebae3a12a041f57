#include "dataset/writer_lease.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "common/parse_number.h"

#include "common/unique_id.h"
#include "format/text_fields.h"
#include "storage/small_file.h"

namespace stoker::dataset {

std::string LeasePath(uint64_t writer) {
  return fmt::format("{}/{:016x}.lease", kWritersDir, writer);
}

std::optional<uint64_t> WriterOfLeaseName(std::string_view name) {
  constexpr std::string_view kSuffix = ".lease";
  if (name.size() != 16 + kSuffix.size() || !name.ends_with(kSuffix)) return std::nullopt;
  auto id = format::ParseNumber(name.substr(0, 16), 16, "writer", name);
  if (!id) return std::nullopt;
  return *id;
}

namespace {

std::string ReadLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// Field 22 of /proc/<pid>/stat (after the command name, which may hold spaces and parentheses):
// when the process started, in clock ticks since boot; 0 if there is no such process.
uint64_t StartTime(uint64_t pid) {
  const std::string stat = ReadLine(fmt::format("/proc/{}/stat", pid));
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(stat.substr(close + 1));
  std::string field;
  for (int k = 3; k <= 22 && fields >> field; ++k) {
    if (k == 22) return ParseUnsigned<uint64_t>(field).value_or(0);
  }
  return 0;
}

std::string PidNamespace() {
  std::error_code ec;
  const auto target = std::filesystem::read_symlink("/proc/self/ns/pid", ec);
  return ec ? std::string() : target.string();
}

}  // namespace

LeaseHolder ThisProcess() {
  char host[256] = {};
  (void)::gethostname(host, sizeof host - 1);
  LeaseHolder holder;
  holder.host = host;
  holder.boot = ReadLine("/proc/sys/kernel/random/boot_id");
  holder.pid_namespace = PidNamespace();
  holder.pid = static_cast<uint64_t>(::getpid());
  holder.start = StartTime(holder.pid);
  return holder;
}

std::optional<LeaseHolder> ParseLeaseHolder(std::string_view lease_text) {
  LeaseHolder holder;
  std::istringstream lines{std::string(lease_text)};
  for (std::string line; std::getline(lines, line);) {
    const size_t space = line.find(' ');
    if (space == std::string::npos) continue;
    const std::string_view key = std::string_view(line).substr(0, space);
    const std::string value = line.substr(space + 1);
    if (key == "host") holder.host = value;
    if (key == "boot") holder.boot = value;
    if (key == "pidns") holder.pid_namespace = value;
    if (key == "pid") holder.pid = ParseUnsigned<uint64_t>(value).value_or(0);
    if (key == "start") holder.start = ParseUnsigned<uint64_t>(value).value_or(0);
  }
  if (holder.pid == 0 || holder.boot.empty() || holder.pid_namespace.empty()) return std::nullopt;
  return holder;
}

bool HolderIsGone(const LeaseHolder& holder) {
  const LeaseHolder here = ThisProcess();
  if (holder.host != here.host || holder.boot != here.boot || here.boot.empty() ||
      holder.pid_namespace != here.pid_namespace || here.pid_namespace.empty() ||
      holder.start == 0) {
    return false;  // another machine, boot or namespace: only the writer timeout can tell
  }
  return StartTime(holder.pid) != holder.start;
}

WriterLease::WriterLease(Storage& storage, uint64_t writer, std::chrono::milliseconds heartbeat)
    : storage_(storage),
      writer_(writer),
      path_(LeasePath(writer)),
      heartbeat_(heartbeat),
      holder_(ThisProcess()) {}

Result<std::unique_ptr<WriterLease>> WriterLease::Take(Storage& storage,
                                                       std::chrono::milliseconds heartbeat) {
  std::unique_ptr<WriterLease> lease(new WriterLease(storage, UniqueId(), heartbeat));
  STOKER_RETURN_IF_ERROR(storage.CreateDirs(kWritersDir));
  // Durable before the first file it covers exists: gc must never see that file without it.
  STOKER_RETURN_IF_ERROR(lease->Write(0));
  lease->thread_ = std::thread([raw = lease.get()] { raw->Beat(); });
  return lease;
}

WriterLease::~WriterLease() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  (void)storage_.Remove(path_);
}

// Each beat writes new content: gc tells a live writer from a dead one by the content changing.
Status WriterLease::Write(uint64_t beat) {
  return storage::WriteSmallFile(
      storage_, path_,
      fmt::format("stoker-writer 1\nbeat {}\nhost {}\nboot {}\npidns {}\npid {}\nstart {}\n", beat,
                  holder_.host, holder_.boot, holder_.pid_namespace, holder_.pid, holder_.start));
}

void WriterLease::Beat() {
  std::unique_lock lock(mu_);
  for (uint64_t beat = 1;; ++beat) {
    if (wake_.wait_for(lock, heartbeat_, [&] { return stopping_; })) return;
    lock.unlock();
    // Never re-create a lease that gc expired and removed: gc may have removed this writer's
    // files since, and a lease that reappeared would hide that from Check(). (A failed beat is
    // simply retried at the next one; only the content's staying unchanged ages a lease.)
    auto exists = storage_.Exists(path_);
    const bool gone = exists && !*exists;
    if (!gone) (void)Write(beat);
    lock.lock();
    if (gone) {
      lost_ = true;
      return;
    }
  }
}

Status WriterLease::Check() {
  bool lost;
  {
    std::lock_guard lock(mu_);
    lost = lost_;
  }
  if (!lost) {
    STOKER_ASSIGN_OR_RETURN(const bool exists, storage_.Exists(path_));
    lost = !exists;
  }
  if (!lost) return Status::OK();
  return Status::NotFound(fmt::format(
      "{} is gone: a `stoker gc` saw no heartbeat from this writer for its --writer-timeout, so "
      "files it wrote may have been removed before it could publish; nothing was published",
      storage_.Describe(path_)));
}

}  // namespace stoker::dataset
