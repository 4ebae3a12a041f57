// One retry policy for the network clients (stoker:// in src/net, s3:// in src/s3) and for
// writers that lose the race to publish a version (dataset/commit_version.h): which failures are
// tried again (Status::retryable, include/stoker/status.h), how many times, how long to wait in
// between, and the deadline that bounds them all.
//
// Pauses grow exponentially with full jitter (a uniform draw below the cap), as the AWS SDKs do:
// clients that failed together, because a server restarted, do not come back together.
// Thread-safety: a RetryPolicy is a value; a Retry belongs to one operation on one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

#include "stoker/status.h"

namespace stoker {

struct RetryPolicy {
  int max_attempts = 4;                          // the first attempt included
  std::chrono::milliseconds base_backoff{10};    // cap of the first pause; doubles per retry
  std::chrono::milliseconds max_backoff{20000};  // no pause is longer
  Status Validate() const;
};

// One operation's attempts:
//
//   Retry retry(policy);
//   Status st;
//   while (retry.Next(st, deadline)) { st = TryOnce(); if (st.ok()) break; }
class Retry {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Retry(const RetryPolicy& policy) : policy_(policy) {}

  // Whether to make another attempt. The first call says yes at once. Later calls, after the
  // attempt failed with `last`: no if `last` is OK or not retryable, attempts are used up or the
  // deadline has passed; else they sleep the next pause (cut short at the deadline) and say yes.
  bool Next(const Status& last, Clock::time_point deadline = Clock::time_point::max());
  // The same for a failure the caller decided to try again whatever its code (a writer that
  // lost the race for a version number, AlreadyExists): the first call says yes at once; later
  // calls say no once attempts are used up or the deadline has passed, else pause and say yes.
  bool Again(Clock::time_point deadline = Clock::time_point::max());
  int attempt() const { return attempt_; }  // 1 during the first attempt
  int retries() const { return attempt_ > 0 ? attempt_ - 1 : 0; }
  // The pause before attempt `attempt` + 1 (>= 2), drawn from [0, cap]; exposed for tests.
  static std::chrono::microseconds Pause(const RetryPolicy& policy, int attempt);

 private:
  RetryPolicy policy_;
  int attempt_ = 0;
};

// The deadline of one request: `option` when set (it must be positive), else $STOKER_TIMEOUT
// ("30s", "2m", seconds), else 30 seconds. InvalidArgument naming the bad setting.
Result<std::chrono::milliseconds> RequestTimeout(std::optional<std::chrono::milliseconds> option);

// How long a client keeps trying to reach a server that refuses or does not answer connects
// (a restart, a brief partition): $STOKER_RECONNECT_TIMEOUT ("60s", "5m"; "0" fails at once),
// else 60 seconds. InvalidArgument naming the bad setting.
Result<std::chrono::milliseconds> ReconnectTimeout();

}  // namespace stoker
