#include "storage/fault_storage.h"

#include <mutex>
#include <thread>
#include <vector>

#include "common/random.h"

namespace stoker::storage {

struct FaultStorage::Injector {
  explicit Injector(FaultOptions o) : options(std::move(o)), rng(options.seed) {}

  bool Applies(std::string_view path) const {
    return options.path_filter.empty() || path.find(options.path_filter) != std::string_view::npos;
  }
  bool Fire(double probability) {
    if (probability <= 0) return false;
    std::lock_guard lock(mu);
    return rng.NextDouble() < probability;
  }
  uint64_t Below(uint64_t n) {
    std::lock_guard lock(mu);
    return rng.Below(n);
  }

  const FaultOptions options;
  std::mutex mu;
  Pcg32 rng;
  Counters counters;  // guarded by mu
};

namespace {

class FaultFile final : public RandomAccessFile {
 public:
  FaultFile(std::unique_ptr<RandomAccessFile> base, std::shared_ptr<FaultStorage::Injector> inj,
            std::string name)
      : base_(std::move(base)), inj_(std::move(inj)), name_(std::move(name)) {}
  uint64_t Size() const override { return base_->Size(); }
  Status ReadAt(uint64_t offset, std::span<std::byte> dst) const override {
    const auto& o = inj_->options;
    if (o.read_delay.count() > 0) std::this_thread::sleep_for(o.read_delay);
    if (inj_->Fire(o.read_error_probability)) {
      std::lock_guard lock(inj_->mu);
      ++inj_->counters.read_errors;
      return Status::IOError("injected read error on " + name_);
    }
    if (dst.size() > 0 && inj_->Fire(o.short_read_probability)) {
      std::lock_guard lock(inj_->mu);
      ++inj_->counters.short_reads;
      return Status::IOError("injected short read on " + name_);
    }
    STOKER_RETURN_IF_ERROR(base_->ReadAt(offset, dst));
    if (dst.size() > 0 && inj_->Fire(o.bit_flip_probability)) {
      const uint64_t bit = inj_->Below(dst.size() * 8);
      dst[bit / 8] ^= std::byte{static_cast<unsigned char>(1u << (bit % 8))};
      std::lock_guard lock(inj_->mu);
      ++inj_->counters.bit_flips;
    }
    return Status::OK();
  }

 private:
  std::unique_ptr<RandomAccessFile> base_;
  std::shared_ptr<FaultStorage::Injector> inj_;
  std::string name_;
};

class FaultWritableFile final : public WritableFile {
 public:
  FaultWritableFile(std::unique_ptr<WritableFile> base, std::shared_ptr<FaultStorage::Injector> inj,
                    std::string name)
      : base_(std::move(base)), inj_(std::move(inj)), name_(std::move(name)) {}
  Status Append(std::span<const std::byte> data) override {
    STOKER_RETURN_IF_ERROR(MaybeFail("write"));
    return base_->Append(data);
  }
  Status Sync() override {
    STOKER_RETURN_IF_ERROR(MaybeFail("sync"));
    return base_->Sync();
  }
  Status Close() override { return base_->Close(); }

 private:
  Status MaybeFail(std::string_view what) {
    if (!inj_->Fire(inj_->options.write_error_probability)) return Status::OK();
    std::lock_guard lock(inj_->mu);
    ++inj_->counters.write_errors;
    return Status::IOError("injected " + std::string(what) + " error on " + name_);
  }
  std::unique_ptr<WritableFile> base_;
  std::shared_ptr<FaultStorage::Injector> inj_;
  std::string name_;
};

// A copy of mapped bytes with one bit flipped (mapped bytes themselves are read-only).
class FlippedBytes final : public FileBytes {
 public:
  explicit FlippedBytes(std::vector<std::byte> data) : data_(std::move(data)) {}
  std::span<const std::byte> bytes() const override { return data_; }

 private:
  std::vector<std::byte> data_;
};

}  // namespace

FaultStorage::FaultStorage(std::shared_ptr<Storage> base, FaultOptions options)
    : ForwardingStorage(std::move(base)),
      injector_(std::make_shared<Injector>(std::move(options))) {}
FaultStorage::~FaultStorage() = default;

Result<std::unique_ptr<RandomAccessFile>> FaultStorage::OpenRead(std::string_view path) {
  STOKER_ASSIGN_OR_RETURN(auto file, base()->OpenRead(path));
  if (!injector_->Applies(path)) return file;
  return std::make_unique<FaultFile>(std::move(file), injector_, Describe(path));
}

Result<std::unique_ptr<WritableFile>> FaultStorage::Create(std::string_view path) {
  STOKER_ASSIGN_OR_RETURN(auto file, base()->Create(path));
  if (!injector_->Applies(path)) return file;
  return std::make_unique<FaultWritableFile>(std::move(file), injector_, Describe(path));
}

Result<std::shared_ptr<const FileBytes>> FaultStorage::Map(std::string_view path) {
  STOKER_ASSIGN_OR_RETURN(auto bytes, base()->Map(path));
  if (!injector_->Applies(path)) return bytes;
  const auto& o = injector_->options;
  if (injector_->Fire(o.read_error_probability)) {
    std::lock_guard lock(injector_->mu);
    ++injector_->counters.read_errors;
    return Err(Status::IOError("injected read error on " + Describe(path)));
  }
  if (!bytes->bytes().empty() && injector_->Fire(o.bit_flip_probability)) {
    std::vector<std::byte> copy(bytes->bytes().begin(), bytes->bytes().end());
    const uint64_t bit = injector_->Below(copy.size() * 8);
    copy[bit / 8] ^= std::byte{static_cast<unsigned char>(1u << (bit % 8))};
    std::lock_guard lock(injector_->mu);
    ++injector_->counters.bit_flips;
    return std::make_shared<FlippedBytes>(std::move(copy));
  }
  return bytes;
}

Status FaultStorage::Rename(std::string_view from, std::string_view to) {
  if (injector_->Applies(to) && injector_->Fire(injector_->options.write_error_probability)) {
    std::lock_guard lock(injector_->mu);
    ++injector_->counters.write_errors;
    return Status::IOError("injected rename error on " + Describe(to));
  }
  return base()->Rename(from, to);
}

Status FaultStorage::CreateExclusive(std::string_view path, std::span<const std::byte> bytes) {
  if (injector_->Applies(path) && injector_->Fire(injector_->options.write_error_probability)) {
    std::lock_guard lock(injector_->mu);
    ++injector_->counters.write_errors;
    return Status::IOError("injected create error on " + Describe(path));
  }
  STOKER_RETURN_IF_ERROR(base()->CreateExclusive(path, bytes));
  if (injector_->Applies(path) && injector_->Fire(injector_->options.lost_reply_probability)) {
    std::lock_guard lock(injector_->mu);
    ++injector_->counters.lost_replies;
    return Status::IOError("injected lost reply: " + Describe(path) + " was created");
  }
  return Status::OK();
}

FaultStorage::Counters FaultStorage::counters() const {
  std::lock_guard lock(injector_->mu);
  return injector_->counters;
}

}  // namespace stoker::storage
