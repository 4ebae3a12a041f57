#include "common/retry.h"

#include <algorithm>
#include <cstdlib>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "common/progress.h"

namespace stoker {

Status RetryPolicy::Validate() const {
  if (max_attempts < 1 || max_attempts > 100) {
    return Status::InvalidArgument(
        fmt::format("retry policy: {} attempts (1 to 100)", max_attempts));
  }
  if (base_backoff.count() < 0 || max_backoff < base_backoff) {
    return Status::InvalidArgument("retry policy: backoffs must satisfy 0 <= base <= max");
  }
  return Status::OK();
}

std::chrono::microseconds Retry::Pause(const RetryPolicy& policy, int attempt) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const int doublings = std::min(attempt - 1, 30);
  const double cap_us = std::min(static_cast<double>(policy.max_backoff.count()),
                                 static_cast<double>(policy.base_backoff.count()) *
                                     static_cast<double>(1ull << doublings)) *
                        1000.0;
  std::uniform_real_distribution<double> draw(0.0, cap_us);
  return std::chrono::microseconds(static_cast<int64_t>(draw(rng)));
}

bool Retry::Next(const Status& last, Clock::time_point deadline) {
  if (attempt_ > 0 && (last.ok() || !last.retryable())) return false;
  return Again(deadline);
}

bool Retry::Again(Clock::time_point deadline) {
  if (attempt_ == 0) {
    attempt_ = 1;
    return true;
  }
  if (attempt_ >= policy_.max_attempts) return false;
  const auto now = Clock::now();
  if (now >= deadline) return false;
  const auto pause = Pause(policy_, attempt_);
  std::this_thread::sleep_for(deadline - now < pause ? deadline - now : Clock::duration(pause));
  if (Clock::now() >= deadline) return false;
  ++attempt_;
  return true;
}

Result<std::chrono::milliseconds> RequestTimeout(std::optional<std::chrono::milliseconds> option) {
  if (option) {
    if (option->count() <= 0) {
      return Err(Status::InvalidArgument("the request timeout must be positive"));
    }
    return *option;
  }
  const char* text = std::getenv("STOKER_TIMEOUT");
  if (text == nullptr || *text == '\0') return std::chrono::milliseconds(30000);
  auto parsed = ParseDuration(text);
  if (!parsed || parsed->count() == 0) {
    return Err(Status::InvalidArgument(
        fmt::format("$STOKER_TIMEOUT '{}': expected a positive duration such as 30s or 2m", text)));
  }
  return std::chrono::milliseconds(*parsed);
}

Result<std::chrono::milliseconds> ReconnectTimeout() {
  const char* text = std::getenv("STOKER_RECONNECT_TIMEOUT");
  if (text == nullptr || *text == '\0') return std::chrono::milliseconds(60000);
  auto parsed = ParseDuration(text);
  if (!parsed) {
    return Err(Status::InvalidArgument(fmt::format(
        "$STOKER_RECONNECT_TIMEOUT '{}': expected a duration such as 60s or 5m (0: no retries)",
        text)));
  }
  return std::chrono::milliseconds(*parsed);
}

}  // namespace stoker
