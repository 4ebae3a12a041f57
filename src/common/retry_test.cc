#include "common/retry.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace stoker {
namespace {

using std::chrono::milliseconds;

TEST(Retry, PausesGrowWithFullJitterUpToTheCap) {
  const RetryPolicy policy{
      .max_attempts = 10, .base_backoff = milliseconds(10), .max_backoff = milliseconds(50)};
  for (int attempt = 1; attempt <= 8; ++attempt) {
    const auto cap = std::min<int64_t>(50'000, 10'000LL << (attempt - 1));
    int64_t largest = 0;
    for (int i = 0; i < 200; ++i) {
      const auto pause = Retry::Pause(policy, attempt).count();
      EXPECT_GE(pause, 0);
      EXPECT_LE(pause, cap) << attempt;
      largest = std::max(largest, pause);
    }
    // Full jitter spreads over the whole range: 200 draws reach its upper half.
    EXPECT_GT(largest, cap / 2) << attempt;
  }
}

TEST(Retry, TriesAgainOnlyRetryableFailuresWhileAttemptsLast) {
  const RetryPolicy policy{
      .max_attempts = 3, .base_backoff = milliseconds(0), .max_backoff = milliseconds(0)};
  Retry retry(policy);
  EXPECT_TRUE(retry.Next(Status::OK()));  // the first attempt
  EXPECT_EQ(retry.attempt(), 1);
  EXPECT_TRUE(retry.Next(Status::Unavailable("down")));
  EXPECT_TRUE(retry.Next(Status::Timeout("slow")));
  EXPECT_EQ(retry.attempt(), 3);
  EXPECT_FALSE(retry.Next(Status::IOError("reset").Retryable()));  // attempts used up
  EXPECT_EQ(retry.retries(), 2);

  for (StatusCode final_code : {StatusCode::kNotFound, StatusCode::kCorruption,
                                StatusCode::kInvalidArgument, StatusCode::kPermissionDenied}) {
    Retry once(policy);
    EXPECT_TRUE(once.Next(Status::OK()));
    EXPECT_FALSE(once.Next(Status(final_code, "final"))) << StatusCodeName(final_code);
  }
  Retry succeeded(policy);
  EXPECT_TRUE(succeeded.Next(Status::OK()));
  EXPECT_FALSE(succeeded.Next(Status::OK()));
}

TEST(Retry, AgainRetriesWhateverTheFailureWhileAttemptsLast) {
  // A writer that lost a version number tries again although AlreadyExists is no failure a
  // client retries.
  const RetryPolicy policy{
      .max_attempts = 3, .base_backoff = milliseconds(0), .max_backoff = milliseconds(0)};
  Retry retry(policy);
  EXPECT_TRUE(retry.Again());
  EXPECT_EQ(retry.attempt(), 1);
  EXPECT_TRUE(retry.Again());
  EXPECT_TRUE(retry.Again());
  EXPECT_EQ(retry.attempt(), 3);
  EXPECT_FALSE(retry.Again());
  EXPECT_EQ(retry.attempt(), 3);
}

TEST(Retry, NoAttemptStartsAfterTheDeadline) {
  const RetryPolicy policy{
      .max_attempts = 100, .base_backoff = milliseconds(1000), .max_backoff = milliseconds(1000)};
  Retry retry(policy);
  ASSERT_TRUE(retry.Next(Status::OK()));
  EXPECT_FALSE(retry.Next(Status::Unavailable("down"), Retry::Clock::now() - milliseconds(1)));
  // A pause longer than the time left ends at the deadline, with no attempt after it.
  // (Pauses average 25 ms: 1,000 attempts would take 25 s, so the deadline is what stops it.)
  Retry pausing(RetryPolicy{
      .max_attempts = 1000, .base_backoff = milliseconds(50), .max_backoff = milliseconds(50)});
  ASSERT_TRUE(pausing.Next(Status::OK()));
  const auto deadline = Retry::Clock::now() + milliseconds(100);
  while (pausing.Next(Status::Unavailable("down"), deadline)) {
  }
  EXPECT_GE(Retry::Clock::now(), deadline);
  EXPECT_LT(pausing.attempt(), 1000);
}

TEST(Retry, PoliciesAndTimeoutsAreChecked) {
  EXPECT_TRUE(RetryPolicy{}.Validate().ok());
  EXPECT_FALSE(RetryPolicy{.max_attempts = 0}.Validate().ok());
  EXPECT_FALSE((RetryPolicy{.base_backoff = milliseconds(10), .max_backoff = milliseconds(5)})
                   .Validate()
                   .ok());
  ::unsetenv("STOKER_TIMEOUT");
  EXPECT_EQ(RequestTimeout(std::nullopt).value(), milliseconds(30000));
  EXPECT_EQ(RequestTimeout(milliseconds(1500)).value(), milliseconds(1500));
  EXPECT_FALSE(RequestTimeout(milliseconds(0)).has_value());
  ::setenv("STOKER_TIMEOUT", "2m", 1);
  EXPECT_EQ(RequestTimeout(std::nullopt).value(), milliseconds(120000));
  EXPECT_EQ(RequestTimeout(milliseconds(7)).value(), milliseconds(7));  // the option wins
  ::setenv("STOKER_TIMEOUT", "soon", 1);
  auto bad = RequestTimeout(std::nullopt);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message().find("$STOKER_TIMEOUT 'soon'"), std::string::npos);
  ::unsetenv("STOKER_TIMEOUT");
}

}  // namespace
}  // namespace stoker
