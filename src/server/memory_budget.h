// A byte budget shared by all connections: answer buffers are taken from it, and a request
// that finds no room waits (the spec: wait rather than fail). Thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace stoker::server {

class MemoryBudget {
 public:
  // `waits` and `peak` (optional) count acquisitions that had to wait and the most bytes held.
  MemoryBudget(uint64_t limit, std::atomic<uint64_t>* waits, std::atomic<uint64_t>* peak)
      : limit_(limit), waits_(waits), peak_(peak) {}

  // Blocks until `n` bytes fit. `n` must not exceed the limit (ServerOptions::Validate makes
  // sure the largest answer fits), or this would wait forever.
  void Acquire(uint64_t n) {
    std::unique_lock lock(mu_);
    if (used_ + n > limit_ && waits_ != nullptr) waits_->fetch_add(1);
    room_.wait(lock, [&] { return used_ + n <= limit_; });
    used_ += n;
    if (peak_ != nullptr && used_ > peak_->load()) peak_->store(used_);
  }
  void Release(uint64_t n) {
    {
      std::lock_guard lock(mu_);
      used_ -= n;
    }
    room_.notify_all();
  }
  uint64_t used() const {
    std::lock_guard lock(mu_);
    return used_;
  }

 private:
  const uint64_t limit_;
  std::atomic<uint64_t>* const waits_;
  std::atomic<uint64_t>* const peak_;
  mutable std::mutex mu_;
  std::condition_variable room_;
  uint64_t used_ = 0;  // guarded by mu_
};

// Holds `n` bytes of a budget for its lifetime.
class BudgetLease {
 public:
  BudgetLease(MemoryBudget& budget, uint64_t n) : budget_(budget), n_(n) { budget_.Acquire(n_); }
  ~BudgetLease() { budget_.Release(n_); }
  BudgetLease(const BudgetLease&) = delete;
  BudgetLease& operator=(const BudgetLease&) = delete;

 private:
  MemoryBudget& budget_;
  const uint64_t n_;
};

}  // namespace stoker::server
