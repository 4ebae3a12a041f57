// S3 credentials that can run out: where they come from and when to fetch them again.
//
// Keys in the environment or in ~/.aws/credentials never expire. The other sources the AWS
// SDKs read give temporary credentials with an expiry time (credential_process, a web identity
// token exchanged at STS, the ECS/EKS container endpoint, the EC2 instance metadata service); a
// training job outlives them (1-12 h), so a CredentialProvider fetches them again before they
// run out, and at once when the store refuses them as expired (S3Client does that). Which source
// a configuration names is decided in s3_config.cc; the sources themselves are in
// credential_sources.cc.
//
// Thread-safe: many reader threads sign with one provider, and one of them refreshes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "s3/sigv4.h"
#include "stoker/status.h"

namespace stoker::s3 {

using Clock = std::chrono::system_clock;

struct TimedCredentials {
  Credentials credentials;
  std::optional<Clock::time_point> expires;  // none: they never expire
};

class CredentialProvider {
 public:
  using Fetch = std::function<Result<TimedCredentials>()>;

  // Credentials that never change (the environment, a credentials file, options).
  static std::shared_ptr<CredentialProvider> Fixed(Credentials credentials, std::string source);
  // Credentials `fetch` gets, fetched once now (an error is returned here: a source that does
  // not answer is named at open, not at the first read) and again before they expire.
  // `now` is the clock (tests move it).
  static Result<std::shared_ptr<CredentialProvider>> Refreshing(
      Fetch fetch, std::string source, std::function<Clock::time_point()> now = Clock::now);

  // Credentials to sign the next request with. Once less than a refresh margin of their life
  // is left (5 minutes, or half their lifetime when that is shorter), one caller fetches new
  // ones while the others go on signing with the old ones; only once they have expired do the
  // others wait for the fetch. A failed refresh while the old ones are valid is logged and
  // tried again no sooner than kRetryAfterFailure later; once they have expired, it is the
  // error (and the next call tries again).
  Result<Credentials> Current();
  // The store refused `refused` (expired, or revoked): fetch anew unless another thread already
  // has, or this provider fetched after a refusal less than kRefusalInterval ago (a plain lack
  // of permission looks the same and must not turn every request into a fetch). False when no
  // other credentials can be had (fixed keys, or too soon).
  bool RefreshAfterRefusal(const Credentials& refused);

  bool refreshes() const { return static_cast<bool>(fetch_); }
  // Where the credentials come from, for messages: "the environment", "credential_process of
  // profile 'p'", "the EC2 instance metadata service", ...
  const std::string& source() const { return source_; }
  int fetches() const;

  static constexpr auto kRetryAfterFailure = std::chrono::seconds(10);
  static constexpr auto kRefusalInterval = std::chrono::seconds(5);

 private:
  CredentialProvider(Fetch fetch, std::string source, std::function<Clock::time_point()> now);
  // Fetches with `mu_` released (a fetch is a process or a network round trip), as the one
  // refresher; stores the result. Called and returns with `lock` held.
  Status Refresh(std::unique_lock<std::mutex>& lock);
  bool DueLocked(Clock::time_point now) const;
  bool ExpiredLocked(Clock::time_point now) const;

  const Fetch fetch_;
  const std::string source_;
  const std::function<Clock::time_point()> now_;
  mutable std::mutex mu_;
  std::condition_variable refreshed_;
  TimedCredentials current_;
  Clock::time_point fetched_at_{};
  bool refreshing_ = false;
  Status last_failure_;                     // of the last fetch, if it failed
  Clock::time_point retry_at_{};            // no advisory refresh before this
  Clock::time_point refused_refresh_at_{};  // the last fetch after a refusal
  int fetches_ = 0;
};

// The credential documents the sources answer with, checked (Corruption naming `source` when a
// field is missing or malformed):
// - credential_process: {"Version": 1, "AccessKeyId", "SecretAccessKey", "SessionToken"?,
//   "Expiration"?}
// - the container endpoint and the instance metadata service: {"AccessKeyId",
//   "SecretAccessKey", "Token", "Expiration"} (IMDS adds "Code": "Success")
Result<TimedCredentials> ParseCredentialJson(std::string_view json, std::string_view source);
// STS's AssumeRoleWithWebIdentity answer: <Credentials><AccessKeyId>…<SecretAccessKey>…
// <SessionToken>…<Expiration>…</Credentials>.
Result<TimedCredentials> ParseStsCredentials(std::string_view xml, std::string_view source);
// "2026-11-29T21:45:19Z" (fractional seconds and a +hh:mm offset are accepted too).
std::optional<Clock::time_point> ParseIso8601(std::string_view text);

}  // namespace stoker::s3
