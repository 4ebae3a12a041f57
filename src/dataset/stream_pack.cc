#include "dataset/stream_pack.h"

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "common/unique_id.h"

namespace stoker::dataset {

Result<std::string> SampleKeyPrefix(const std::optional<std::string>& name) {
  if (!name) return fmt::format("{:016x}/", UniqueId());
  const bool valid =
      !name->empty() && name->size() <= 64 && *name != "." && *name != ".." &&
      std::ranges::all_of(*name, [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '_' || c == '-';
      });
  if (!valid) {
    return Err(Status::InvalidArgument(
        fmt::format("name '{}': 1 to 64 letters, digits, '.', '_' or '-'", *name)));
  }
  return *name + "/";
}

// The pack's source: samples from the producer, at most `capacity` bytes of them waiting.
class StreamPack::Queue : public PackSource {
 public:
  explicit Queue(uint64_t capacity) : capacity_(capacity) {}

  Status Push(std::vector<SourceItem> sample) {
    uint64_t bytes = 0;
    for (const SourceItem& item : sample) bytes += item.size();
    std::unique_lock lock(mu_);
    // A sample larger than the whole queue goes in alone.
    space_cv_.wait(lock,
                   [&] { return consumer_done_ || held_ == 0 || held_ + bytes <= capacity_; });
    if (consumer_done_) {
      return consumer_status_.ok() ? Status::InvalidArgument("the writer is closed")
                                   : consumer_status_;
    }
    for (SourceItem& item : sample) items_.push_back(std::move(item));
    held_ += bytes;
    ++samples_;
    item_cv_.notify_one();
    return Status::OK();
  }

  // The producer is done (`why` OK) or gave up (`why` an error the pack then fails with).
  void Close(Status why) {
    std::lock_guard lock(mu_);
    closed_ = true;
    producer_status_ = std::move(why);
    item_cv_.notify_all();
  }

  void ConsumerDone(Status status) {
    std::lock_guard lock(mu_);
    consumer_done_ = true;
    consumer_status_ = std::move(status);
    space_cv_.notify_all();
    reading_cv_.notify_all();
  }

  // Waits until the pack asks for its first item (its checks of the destination passed) or
  // ends; returns the pack's error if it ended with one.
  Status WaitUntilReading() {
    std::unique_lock lock(mu_);
    reading_cv_.wait(lock, [&] { return reading_ || consumer_done_; });
    return consumer_done_ ? consumer_status_ : Status::OK();
  }

  Result<std::optional<SourceItem>> Next() override {
    std::unique_lock lock(mu_);
    if (!reading_) {
      reading_ = true;
      reading_cv_.notify_all();
    }
    item_cv_.wait(lock, [&] { return !items_.empty() || closed_; });
    if (!producer_status_.ok()) return Err(producer_status_);
    if (items_.empty()) return std::optional<SourceItem>();
    SourceItem item = std::move(items_.front());
    items_.pop_front();
    held_ -= item.size();
    consumed_ += item.size();
    space_cv_.notify_one();
    return std::optional<SourceItem>(std::move(item));
  }

  uint64_t total_items() const override { return 0; }
  uint64_t total_bytes() const override { return 0; }
  uint64_t consumed_bytes() const override {
    std::lock_guard lock(mu_);
    return consumed_;
  }
  uint64_t samples() const {
    std::lock_guard lock(mu_);
    return samples_;
  }

 private:
  const uint64_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable space_cv_, item_cv_, reading_cv_;
  std::deque<SourceItem> items_;
  uint64_t held_ = 0, consumed_ = 0, samples_ = 0;
  bool reading_ = false, closed_ = false, consumer_done_ = false;
  Status producer_status_, consumer_status_;
};

Result<std::unique_ptr<StreamPack>> StreamPack::Start(std::shared_ptr<Storage> destination,
                                                      PackOptions options, uint64_t queue_bytes) {
  STOKER_RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<StreamPack> pack(new StreamPack());
  pack->destination_ = std::move(destination);
  pack->queue_ = std::make_unique<Queue>(queue_bytes);
  StreamPack* self = pack.get();
  pack->thread_ = std::thread([self, options = std::move(options)] {
    self->result_ = Pack(*self->queue_, *self->destination_, options);
    self->queue_->ConsumerDone(self->result_ ? Status::OK() : self->result_.error());
  });
  if (Status early = pack->queue_->WaitUntilReading(); !early.ok()) {
    pack->thread_.join();
    pack->finished_ = true;
    return Err(early);
  }
  return pack;
}

StreamPack::~StreamPack() { Abort(); }

Status StreamPack::Add(std::vector<SourceItem> sample) {
  if (finished_) return Status::InvalidArgument("the writer is closed");
  return queue_->Push(std::move(sample));
}

Result<PackSummary> StreamPack::Finish() {
  if (finished_) return Err(Status::InvalidArgument("the writer is closed"));
  queue_->Close(Status::OK());
  thread_.join();
  finished_ = true;
  return std::move(result_);
}

void StreamPack::Abort() {
  if (finished_ || !thread_.joinable()) return;
  queue_->Close(Status::Cancelled("the writer was closed without finishing; nothing published"));
  thread_.join();
  finished_ = true;
}

uint64_t StreamPack::samples_added() const { return queue_->samples(); }

}  // namespace stoker::dataset
