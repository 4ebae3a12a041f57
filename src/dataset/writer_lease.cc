#include "dataset/writer_lease.h"

#include <fmt/format.h>

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

WriterLease::WriterLease(Storage& storage, uint64_t writer, std::chrono::milliseconds heartbeat)
    : storage_(storage), writer_(writer), path_(LeasePath(writer)), heartbeat_(heartbeat) {}

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
  return storage::WriteSmallFile(storage_, path_, fmt::format("stoker-writer 1\nbeat {}\n", beat));
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
