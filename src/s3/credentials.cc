#include "s3/credentials.h"

#include <algorithm>
#include <cstdio>
#include <ctime>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "s3/xml.h"

namespace stoker::s3 {

namespace {

// The AWS SDKs refresh 5-15 minutes before expiry; credentials that live less than twice the
// margin (a test's, or an odd source's) are refreshed at half their life instead, so they are
// not fetched again for every request.
constexpr auto kRefreshMargin = std::chrono::minutes(5);

}  // namespace

CredentialProvider::CredentialProvider(Fetch fetch, std::string source,
                                       std::function<Clock::time_point()> now)
    : fetch_(std::move(fetch)), source_(std::move(source)), now_(std::move(now)) {}

std::shared_ptr<CredentialProvider> CredentialProvider::Fixed(Credentials credentials,
                                                              std::string source) {
  std::shared_ptr<CredentialProvider> p(
      new CredentialProvider(nullptr, std::move(source), Clock::now));
  p->current_.credentials = std::move(credentials);
  return p;
}

Result<std::shared_ptr<CredentialProvider>> CredentialProvider::Refreshing(
    Fetch fetch, std::string source, std::function<Clock::time_point()> now) {
  std::shared_ptr<CredentialProvider> p(
      new CredentialProvider(std::move(fetch), std::move(source), std::move(now)));
  std::unique_lock lock(p->mu_);
  STOKER_RETURN_IF_ERROR(p->Refresh(lock));
  return p;
}

Status CredentialProvider::Refresh(std::unique_lock<std::mutex>& lock) {
  refreshing_ = true;
  ++fetches_;
  lock.unlock();
  auto fetched = fetch_();
  const Clock::time_point now = now_();
  lock.lock();
  refreshing_ = false;
  refreshed_.notify_all();
  Status status;
  if (!fetched) {
    status = fetched.error().WithContext(fmt::format("S3 credentials from {}", source_));
  } else if (fetched->credentials.access_key.empty() || fetched->credentials.secret_key.empty()) {
    status = Status::Corruption(
        fmt::format("S3 credentials from {}: no access key or no secret key", source_));
  } else if (fetched->expires.value_or(Clock::time_point::max()) <= now) {
    // A source that hands out what it cached past its life (or a clock far off): taking them
    // would fetch again at every request.
    status = Status::Unavailable(
        fmt::format("S3 credentials from {} had already expired when they came", source_));
  } else {
    current_ = std::move(*fetched);
    fetched_at_ = now;
    last_failure_ = Status::OK();
    return Status::OK();
  }
  last_failure_ = status;
  retry_at_ = now + kRetryAfterFailure;
  return status;
}

bool CredentialProvider::DueLocked(Clock::time_point now) const {
  if (!fetch_ || !current_.expires) return false;
  const auto life = *current_.expires - fetched_at_;
  const auto margin = std::min<Clock::duration>(kRefreshMargin, life / 2);
  return now >= *current_.expires - margin;
}

bool CredentialProvider::ExpiredLocked(Clock::time_point now) const {
  return current_.expires && now >= *current_.expires;
}

Result<Credentials> CredentialProvider::Current() {
  std::unique_lock lock(mu_);
  Clock::time_point now = now_();
  if (!DueLocked(now)) return current_.credentials;
  if (!ExpiredLocked(now)) {
    // Still valid: one caller refreshes (unless a failure is recent), the others sign on.
    if (refreshing_ || now < retry_at_) return current_.credentials;
    if (Status s = Refresh(lock); !s.ok()) {
      log::Warning("s3", fmt::format("{} (the current ones are valid until {}s from now; "
                                     "trying again in {}s)",
                                     s.message(),
                                     std::chrono::duration_cast<std::chrono::seconds>(
                                         current_.expires.value_or(now) - now)
                                         .count(),
                                     kRetryAfterFailure.count()));
    }
    return current_.credentials;
  }
  // Expired: nothing valid to sign with, so wait for the refresher, or be it.
  if (refreshing_) {
    refreshed_.wait(lock, [&] { return !refreshing_; });
    now = now_();
    if (!ExpiredLocked(now)) return current_.credentials;
    return Err(last_failure_.ok() ? Status::Unavailable(
                                        fmt::format("S3 credentials from {} have expired", source_))
                                  : last_failure_);
  }
  STOKER_RETURN_IF_ERROR(Refresh(lock));
  return current_.credentials;
}

bool CredentialProvider::RefreshAfterRefusal(const Credentials& refused) {
  if (!fetch_) return false;
  std::unique_lock lock(mu_);
  if (refreshing_) refreshed_.wait(lock, [&] { return !refreshing_; });
  if (current_.credentials.access_key != refused.access_key ||
      current_.credentials.session_token != refused.session_token) {
    return true;  // another thread has fetched new ones since
  }
  const Clock::time_point now = now_();
  if (refused_refresh_at_ != Clock::time_point{} && now < refused_refresh_at_ + kRefusalInterval) {
    return false;
  }
  refused_refresh_at_ = now;
  return Refresh(lock).ok();
}

int CredentialProvider::fetches() const {
  std::lock_guard lock(mu_);
  return fetches_;
}

std::optional<Clock::time_point> ParseIso8601(std::string_view text) {
  std::tm tm{};
  int consumed = 0;
  const std::string s(text);
  if (std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &consumed) != 6) {
    return std::nullopt;
  }
  std::string_view rest = std::string_view(s).substr(static_cast<size_t>(consumed));
  if (rest.starts_with('.')) {  // fractional seconds: dropped
    size_t digits = 1;
    while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9') ++digits;
    rest.remove_prefix(digits);
  }
  long offset_seconds = 0;
  if (rest == "Z" || rest == "z") {
    // UTC
  } else if (rest.size() == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':') {
    int hours = 0, minutes = 0;
    if (std::sscanf(std::string(rest.substr(1)).c_str(), "%2d:%2d", &hours, &minutes) != 2) {
      return std::nullopt;
    }
    offset_seconds = (rest[0] == '+' ? 1 : -1) * (hours * 3600L + minutes * 60L);
  } else {
    return std::nullopt;
  }
  if (tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 ||
      tm.tm_min > 59 || tm.tm_sec > 60) {
    return std::nullopt;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  // system_clock counts nanoseconds in 64 bits: it spans 1677 to 2262. Later times (a source
  // that means "never") are taken as 2200, earlier ones as 1970 (long expired).
  constexpr time_t kLatest = 7258118400;  // 2200-01-01T00:00:00Z
  const time_t t = std::clamp<time_t>(timegm(&tm) - offset_seconds, 0, kLatest);
  return Clock::from_time_t(t);
}

Result<TimedCredentials> ParseCredentialJson(std::string_view json, std::string_view source) {
  const auto doc = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) {
    return Err(Status::Corruption(fmt::format("{}: the answer is not a JSON object", source)));
  }
  auto text = [&](const char* key) -> std::string {
    auto it = doc.find(key);
    return it != doc.end() && it->is_string() ? it->get<std::string>() : "";
  };
  if (auto code = text("Code"); !code.empty() && code != "Success") {
    return Err(Status::Unavailable(
        fmt::format("{}: answered Code '{}': {}", source, code, text("Message"))));
  }
  if (auto version = doc.find("Version");
      version != doc.end() && !(version->is_number_integer() && version->get<int>() == 1)) {
    return Err(Status::Corruption(fmt::format("{}: Version must be 1", source)));
  }
  TimedCredentials out;
  out.credentials.access_key = text("AccessKeyId");
  out.credentials.secret_key = text("SecretAccessKey");
  out.credentials.session_token = text("SessionToken");
  if (out.credentials.session_token.empty()) out.credentials.session_token = text("Token");
  if (out.credentials.access_key.empty() || out.credentials.secret_key.empty()) {
    return Err(Status::Corruption(
        fmt::format("{}: the answer has no AccessKeyId or no SecretAccessKey", source)));
  }
  if (auto expiration = text("Expiration"); !expiration.empty()) {
    out.expires = ParseIso8601(expiration);
    if (!out.expires) {
      return Err(Status::Corruption(
          fmt::format("{}: Expiration '{}' is not an ISO 8601 time", source, expiration)));
    }
  }
  return out;
}

Result<TimedCredentials> ParseStsCredentials(std::string_view xml, std::string_view source) {
  const auto blocks = XmlElements(xml, "Credentials");
  if (blocks.empty()) {
    return Err(Status::Corruption(fmt::format("{}: the answer holds no <Credentials>", source)));
  }
  const std::string_view block = blocks.front();
  TimedCredentials out;
  out.credentials.access_key = XmlFirst(block, "AccessKeyId");
  out.credentials.secret_key = XmlFirst(block, "SecretAccessKey");
  out.credentials.session_token = XmlFirst(block, "SessionToken");
  const std::string expiration = XmlFirst(block, "Expiration");
  out.expires = ParseIso8601(expiration);
  if (out.credentials.access_key.empty() || out.credentials.secret_key.empty() ||
      out.credentials.session_token.empty() || !out.expires) {
    return Err(Status::Corruption(
        fmt::format("{}: <Credentials> lacks AccessKeyId, SecretAccessKey, SessionToken or a valid "
                    "Expiration",
                    source)));
  }
  return out;
}

}  // namespace stoker::s3
