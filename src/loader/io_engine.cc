#include "loader/io_engine.h"

#include <liburing.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

namespace stoker::loader {
namespace {

// A pool of threads, each taking one request at a time and calling ReadAt.
class ThreadEngine final : public IoEngine {
 public:
  explicit ThreadEngine(uint32_t threads) {
    for (uint32_t i = 0; i < std::max(1u, threads); ++i) workers_.emplace_back([this] { Run(); });
  }
  ~ThreadEngine() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
  }
  void Submit(ReadRequest request) override {
    {
      std::lock_guard lock(mu_);
      queue_.push_back(std::move(request));
    }
    cv_.notify_one();
  }
  std::string_view name() const override { return "threads"; }

 private:
  void Run() {
    std::unique_lock lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything submitted has been served
      ReadRequest r = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      r.done(r.file->ReadAt(r.offset, r.dst));
      lock.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ReadRequest> queue_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

// One thread owns the ring: it moves queued requests into submission entries, reaps
// completions, and resubmits the remainder of short reads. Files without a descriptor (S3,
// stoker://, a node daemon) go to a pool of `depth` threads, started on the first such read:
// they are network reads, and their concurrency is what hides each request's latency.
class UringEngine final : public IoEngine {
 public:
  UringEngine(io_uring ring, uint32_t depth)
      : ring_(ring), depth_(depth), thread_([this] { Run(); }) {}
  ~UringEngine() override {
    fallback_.reset();  // serves what it was given, then stops
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    io_uring_queue_exit(&ring_);
  }
  void Submit(ReadRequest request) override {
    // (An empty read would complete with 0 bytes, which the ring takes for end of file.)
    if (request.file->NativeFd() < 0 || request.dst.empty()) {
      std::call_once(fallback_started_,
                     [&] { fallback_ = std::make_unique<ThreadEngine>(depth_); });
      fallback_->Submit(std::move(request));
      return;
    }
    {
      std::lock_guard lock(mu_);
      queue_.push_back(std::make_unique<InFlight>(std::move(request)));
    }
    cv_.notify_one();
  }
  std::string_view name() const override { return "io_uring"; }

 private:
  struct InFlight {
    explicit InFlight(ReadRequest r) : request(std::move(r)) {}
    ReadRequest request;
    size_t done = 0;  // bytes read so far
  };

  void Prepare(InFlight* op) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    const auto& r = op->request;
    io_uring_prep_read(sqe, r.file->NativeFd(), r.dst.data() + op->done,
                       static_cast<unsigned>(std::min<size_t>(r.dst.size() - op->done, 1u << 30)),
                       r.offset + op->done);
    io_uring_sqe_set_data(sqe, op);
  }

  void Finish(InFlight* op, Status status) {
    op->request.done(std::move(status));
    delete op;
    --in_flight_;
  }

  void Run() {
    while (true) {
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty() || in_flight_ > 0; });
        if (stop_ && queue_.empty() && in_flight_ == 0) return;
        while (!queue_.empty() && in_flight_ < depth_) {
          Prepare(queue_.front().release());
          queue_.pop_front();
          ++in_flight_;
        }
      }
      io_uring_submit(&ring_);
      if (in_flight_ == 0) continue;
      // Wait briefly for a completion, so new submissions are picked up promptly too.
      io_uring_cqe* cqe = nullptr;
      __kernel_timespec timeout{0, 1'000'000};
      if (io_uring_wait_cqe_timeout(&ring_, &cqe, &timeout) != 0) continue;
      unsigned head;
      unsigned seen = 0;
      std::vector<InFlight*> resubmit;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        ++seen;
        auto* op = static_cast<InFlight*>(io_uring_cqe_get_data(cqe));
        const int res = cqe->res;
        const auto& r = op->request;
        if (res < 0 && res != -EINTR && res != -EAGAIN) {
          Finish(op, Status::FromErrno(-res, "read chunk"));
        } else if (res == 0) {
          Finish(op, Status::IOError(fmt::format("short read: {} of {} bytes at offset {}",
                                                 op->done, r.dst.size(), r.offset)));
        } else {
          if (res > 0) op->done += static_cast<size_t>(res);
          if (op->done < r.dst.size()) {
            resubmit.push_back(op);  // interrupted, or a short read: ask for the rest
          } else {
            Finish(op, Status::OK());
          }
        }
      }
      io_uring_cq_advance(&ring_, seen);
      for (InFlight* op : resubmit) Prepare(op);
    }
  }

  io_uring ring_;
  const uint32_t depth_;
  std::once_flag fallback_started_;
  std::unique_ptr<ThreadEngine> fallback_;  // destroyed (drained) before the ring
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<InFlight>> queue_;  // guarded by mu_
  bool stop_ = false;                            // guarded by mu_
  uint32_t in_flight_ = 0;  // touched by the ring thread only (and read under mu_ by it)
  std::thread thread_;
};

}  // namespace

Result<std::unique_ptr<IoEngine>> CreateIoEngine(IoEngineKind kind, uint32_t depth) {
  depth = std::max(1u, depth);
  if (kind != IoEngineKind::kThreads) {
    io_uring ring;
    const int rc = io_uring_queue_init(std::max(8u, depth * 2), &ring, 0);
    if (rc == 0) return std::make_unique<UringEngine>(ring, depth);
    if (kind == IoEngineKind::kUring) {
      return Err(Status::Unsupported(
          fmt::format("io_uring is not available here: {}", std::strerror(-rc))));
    }
  }
  return std::make_unique<ThreadEngine>(depth);
}

}  // namespace stoker::loader
