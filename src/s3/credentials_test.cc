#include "s3/credentials.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

#include "s3/credential_sources.h"
#include "s3/s3_config.h"
#include "testing/test_util.h"

namespace stoker::s3 {
namespace {

using std::chrono::minutes;
using std::chrono::seconds;

Clock::time_point At(std::string_view iso) { return *ParseIso8601(iso); }

TEST(Iso8601, UtcOffsetsAndFractions) {
  EXPECT_EQ(Clock::to_time_t(At("1970-01-02T00:00:00Z")), 86400);
  EXPECT_EQ(At("2026-11-29T21:45:19Z"), At("2026-11-29T21:45:19.123Z"));
  EXPECT_EQ(At("2026-11-29T23:45:19+02:00"), At("2026-11-29T21:45:19Z"));
  EXPECT_EQ(At("2026-11-29T20:15:19-01:30"), At("2026-11-29T21:45:19Z"));
  // Past what system_clock can count (2262): taken as 2200, still later than any real expiry.
  EXPECT_GT(At("2999-01-01T00:00:00Z"), At("2100-01-01T00:00:00Z"));
  // And before 1677 (a fuzzer found one: the conversion overflowed): taken as 1970, long
  // expired.
  EXPECT_EQ(Clock::to_time_t(At("0001-01-01T00:00:00Z")), 0);
  EXPECT_TRUE(ParseIso8601("-999-01-01T00:00:00Z").value_or(Clock::time_point{}) >=
              Clock::from_time_t(0));
  for (const char* bad : {"", "2026-11-29", "2026-11-29T21:45:19", "2026-13-01T00:00:00Z",
                          "2026-11-29T21:45:19Q", "tomorrow"}) {
    EXPECT_FALSE(ParseIso8601(bad).has_value()) << bad;
  }
}

TEST(CredentialDocuments, ProcessContainerAndInstanceForms) {
  auto process = ParseCredentialJson(
      R"({"Version": 1, "AccessKeyId": "AK", "SecretAccessKey": "SK", "SessionToken": "ST",
          "Expiration": "2026-11-29T22:00:00Z"})",
      "p");
  ASSERT_TRUE(process.has_value()) << process.error().ToString();
  EXPECT_EQ(process->credentials.access_key, "AK");
  EXPECT_EQ(process->credentials.secret_key, "SK");
  EXPECT_EQ(process->credentials.session_token, "ST");
  EXPECT_EQ(process->expires, At("2026-11-29T22:00:00Z"));
  // Long-term keys from a process: no session token, no expiry.
  auto lasting =
      ParseCredentialJson(R"({"Version":1,"AccessKeyId":"A","SecretAccessKey":"S"})", "");
  ASSERT_TRUE(lasting.has_value());
  EXPECT_FALSE(lasting->expires.has_value());
  // The instance metadata form calls the session token "Token".
  auto imds = ParseCredentialJson(
      R"({"Code": "Success", "Type": "AWS-HMAC", "AccessKeyId": "AK", "SecretAccessKey": "SK",
          "Token": "TT", "Expiration": "2026-11-29T22:00:00Z"})",
      "imds");
  ASSERT_TRUE(imds.has_value());
  EXPECT_EQ(imds->credentials.session_token, "TT");

  auto message = [](std::string_view json) {
    auto r = ParseCredentialJson(json, "the source");
    EXPECT_FALSE(r.has_value()) << json;
    return r ? std::string() : r.error().message();
  };
  EXPECT_NE(message("not json").find("the source"), std::string::npos);
  EXPECT_NE(message(R"({"Version": 2, "AccessKeyId": "A", "SecretAccessKey": "S"})")
                .find("Version must be 1"),
            std::string::npos);
  EXPECT_NE(message(R"({"AccessKeyId": "A"})").find("SecretAccessKey"), std::string::npos);
  EXPECT_NE(
      message(R"({"AccessKeyId":"A","SecretAccessKey":"S","Expiration":"soon"})").find("'soon'"),
      std::string::npos);
  EXPECT_NE(
      message(R"({"Code": "AssumeRoleUnauthorizedAccess", "Message": "no role"})").find("no role"),
      std::string::npos);
}

TEST(CredentialDocuments, StsAnswer) {
  auto ok = ParseStsCredentials(
      "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult>"
      "<Credentials><AccessKeyId>AK</AccessKeyId><SecretAccessKey>S&amp;K</SecretAccessKey>"
      "<SessionToken>ST</SessionToken><Expiration>2026-11-29T22:00:00Z</Expiration>"
      "</Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>",
      "sts");
  ASSERT_TRUE(ok.has_value()) << ok.error().ToString();
  EXPECT_EQ(ok->credentials.secret_key, "S&K");
  EXPECT_EQ(ok->expires, At("2026-11-29T22:00:00Z"));
  EXPECT_FALSE(ParseStsCredentials("<ErrorResponse><Error><Code>x</Code></Error>", "s"));
  EXPECT_FALSE(ParseStsCredentials("<Credentials><AccessKeyId>A</AccessKeyId></Credentials>", "s"));
}

// A source whose answers and clock the test controls.
struct FakeSource {
  Clock::time_point now = At("2026-11-29T12:00:00Z");
  int calls = 0;
  bool fail = false;
  Clock::duration lifetime = std::chrono::hours(1);

  CredentialProvider::Fetch Fetch() {
    return [this]() -> Result<TimedCredentials> {
      ++calls;
      if (fail) return Err(Status::Unavailable("the source is down"));
      return TimedCredentials{{"AK" + std::to_string(calls), "SK", "ST"}, now + lifetime};
    };
  }
  std::function<Clock::time_point()> Now() {
    return [this] { return now; };
  }
};

TEST(CredentialProvider, RefreshesBeforeExpiryAndKeepsValidOnesWhenTheSourceFails) {
  FakeSource source;
  auto provider = CredentialProvider::Refreshing(source.Fetch(), "fake", source.Now());
  ASSERT_TRUE(provider.has_value());
  auto& p = **provider;
  EXPECT_TRUE(p.refreshes());
  EXPECT_EQ(source.calls, 1);  // fetched at open
  EXPECT_EQ(p.Current()->access_key, "AK1");
  source.now += minutes(50);  // 10 minutes left: more than the 5-minute margin
  EXPECT_EQ(p.Current()->access_key, "AK1");
  EXPECT_EQ(source.calls, 1);
  source.now += minutes(6);  // 4 minutes left: fetched anew
  EXPECT_EQ(p.Current()->access_key, "AK2");
  EXPECT_EQ(source.calls, 2);

  // The source fails while the credentials are still valid: the old ones sign, and the fetch
  // is tried again only after a pause; once they have expired, the failure is the answer.
  source.fail = true;
  source.now += minutes(58);
  auto still = p.Current();
  ASSERT_TRUE(still.has_value());
  EXPECT_EQ(still->access_key, "AK2");
  EXPECT_EQ(source.calls, 3);
  source.now += seconds(5);
  EXPECT_EQ(p.Current()->access_key, "AK2");
  EXPECT_EQ(source.calls, 3);  // within kRetryAfterFailure: not again
  source.now += seconds(6);
  EXPECT_EQ(p.Current()->access_key, "AK2");
  EXPECT_EQ(source.calls, 4);
  source.now += minutes(3);
  auto expired = p.Current();
  ASSERT_FALSE(expired.has_value());
  EXPECT_NE(expired.error().message().find("the source is down"), std::string::npos);
  EXPECT_NE(expired.error().message().find("from fake"), std::string::npos);
  source.fail = false;
  EXPECT_EQ(p.Current()->access_key, "AK6");
}

TEST(CredentialProvider, CredentialsThatCameExpiredAreRefused) {
  FakeSource source;
  source.lifetime = -seconds(1);
  auto p = CredentialProvider::Refreshing(source.Fetch(), "fake", source.Now());
  ASSERT_FALSE(p.has_value());
  EXPECT_NE(p.error().message().find("had already expired when they came"), std::string::npos);
}

TEST(CredentialProvider, OneThreadRefreshesWhileTheOthersSignWithValidOnes) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::atomic<int> calls = 0;
  std::atomic<int64_t> now_seconds = 0;
  auto now = [&] { return Clock::time_point(seconds(now_seconds.load())); };
  auto fetch = [&]() -> Result<TimedCredentials> {
    const int call = ++calls;
    if (call > 1) {  // the refresh: held until the test lets it go
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return release; });
    }
    return TimedCredentials{{"AK" + std::to_string(call), "SK", ""}, now() + minutes(60)};
  };
  auto p = *CredentialProvider::Refreshing(fetch, "slow", now);
  now_seconds = 58 * 60;  // due, still valid
  Result<Credentials> refresher_got = Err(Status::Internal("not yet"));
  std::thread refresher([&] { refresher_got = p->Current(); });
  while (calls.load() < 2) std::this_thread::yield();
  // The refresh is under way: other callers are not held up by it.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(p->Current()->access_key, "AK1");
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  refresher.join();
  ASSERT_TRUE(refresher_got.has_value());
  EXPECT_EQ(refresher_got->access_key, "AK2");
  EXPECT_EQ(p->Current()->access_key, "AK2");
  EXPECT_EQ(calls.load(), 2);
}

TEST(CredentialProvider, ShortLivedCredentialsAreRefreshedAtHalfTheirLife) {
  FakeSource source;
  source.lifetime = seconds(20);
  auto p = *CredentialProvider::Refreshing(source.Fetch(), "fake", source.Now());
  source.now += seconds(9);
  EXPECT_EQ(p->Current()->access_key, "AK1");
  source.now += seconds(2);
  EXPECT_EQ(p->Current()->access_key, "AK2");
  EXPECT_EQ(p->fetches(), 2);
}

TEST(CredentialProvider, ARefusalFetchesOnceHoweverManyThreadsSawIt) {
  FakeSource source;
  auto p = *CredentialProvider::Refreshing(source.Fetch(), "fake", source.Now());
  const Credentials refused = *p->Current();
  EXPECT_TRUE(p->RefreshAfterRefusal(refused));
  EXPECT_EQ(p->Current()->access_key, "AK2");
  EXPECT_TRUE(p->RefreshAfterRefusal(refused));  // another thread's refusal of the old ones
  EXPECT_EQ(source.calls, 2);
  // The new ones refused at once too (a plain lack of permission looks the same): not fetched
  // again before kRefusalInterval, so a run of AccessDenied is not a run of fetches.
  EXPECT_FALSE(p->RefreshAfterRefusal(*p->Current()));
  EXPECT_EQ(source.calls, 2);
  source.now += seconds(6);
  EXPECT_TRUE(p->RefreshAfterRefusal(*p->Current()));
  EXPECT_EQ(p->Current()->access_key, "AK3");

  auto fixed = CredentialProvider::Fixed({"A", "S", ""}, "the environment");
  EXPECT_FALSE(fixed->refreshes());
  EXPECT_FALSE(fixed->RefreshAfterRefusal(*fixed->Current()));
  EXPECT_EQ(fixed->Current()->access_key, "A");
}

TEST(CredentialProvider, AFailingFirstFetchIsAnErrorAtOpen) {
  FakeSource source;
  source.fail = true;
  auto p = CredentialProvider::Refreshing(source.Fetch(), "fake", source.Now());
  ASSERT_FALSE(p.has_value());
  EXPECT_NE(p.error().message().find("S3 credentials from fake"), std::string::npos);
}

TEST(CredentialProcess, RunsTheCommandAndNamesItsFailure) {
  auto ok = ProcessCredentials(
      R"sh(printf '{"Version": 1, "AccessKeyId": "%s", "SecretAccessKey": "S"}' "$((40 + 2))")sh")();
  ASSERT_TRUE(ok.has_value()) << ok.error().ToString();
  EXPECT_EQ(ok->credentials.access_key, "42");
  auto failed = ProcessCredentials("echo starting >&2; echo 'token expired: log in' >&2; exit 3")();
  ASSERT_FALSE(failed.has_value());
  EXPECT_NE(failed.error().message().find("exited with 3: token expired: log in"),
            std::string::npos)
      << failed.error().ToString();
  auto garbage = ProcessCredentials("echo hello")();
  ASSERT_FALSE(garbage.has_value());
  EXPECT_NE(garbage.error().message().find("the output of 'echo hello'"), std::string::npos);
  // A command that writes more than any credential document, or without end: stopped.
  auto endless = ProcessCredentials("yes")();
  ASSERT_FALSE(endless.has_value());
  EXPECT_NE(endless.error().message().find("wrote more than"), std::string::npos);
  // One that hangs, or leaves a process behind holding its output: killed at the timeout, with
  // the process it left.
  const auto start = std::chrono::steady_clock::now();
  auto hung = ProcessCredentials("sleep 30 & echo '{}'", std::chrono::milliseconds(300))();
  ASSERT_FALSE(hung.has_value());
  EXPECT_NE(hung.error().message().find("did not finish within 0.3 s"), std::string::npos)
      << hung.error().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(10));
}

TEST(CredentialChain, TheSdksOrderAndWhatIsNotSpoken) {
  stoker::test::TempDir home;
  std::filesystem::create_directories(home.Join(".aws"));
  stoker::test::WriteStringToFile(
      home.Join(".aws/config"),
      "[default]\ncredential_process = printf '{\"Version\": 1, \"AccessKeyId\": \"PROC\", "
      "\"SecretAccessKey\": \"S\", \"Expiration\": \"2999-01-01T00:00:00Z\"}'\n"
      "[profile assume]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = default\n"
      "[profile sso]\nsso_session = corp\n"
      "[profile broken]\ncredential_process = false\n"
      "[profile both]\ncredential_process = false\n"
      "[profile irsa]\nweb_identity_token_file = /var/run/token\n");
  // Keys in the credentials file come before a credential_process; an assumed role before both.
  stoker::test::WriteStringToFile(home.Join(".aws/credentials"),
                                  "[both]\naws_access_key_id = FILE\naws_secret_access_key = s\n"
                                  "[assume]\naws_access_key_id = NOT\naws_secret_access_key = s\n");
  const std::map<std::string, std::string> no_imds{{"AWS_EC2_METADATA_DISABLED", "true"}};
  auto env = [&](std::map<std::string, std::string> more) {
    more.insert(no_imds.begin(), no_imds.end());
    return more;
  };
  auto process = LoadS3Config(env({}), home.path());
  ASSERT_TRUE(process.has_value()) << process.error().ToString();
  EXPECT_EQ(process->credentials->Current()->access_key, "PROC");
  EXPECT_EQ(process->credentials->source(), "credential_process of profile 'default'");
  // The environment's keys come first.
  auto keys =
      LoadS3Config(env({{"AWS_ACCESS_KEY_ID", "E"}, {"AWS_SECRET_ACCESS_KEY", "S"}}), home.path());
  EXPECT_EQ(keys->credentials->Current()->access_key, "E");
  EXPECT_FALSE(keys->credentials->refreshes());

  auto message = [&](std::map<std::string, std::string> vars) {
    auto r = LoadS3Config(env(std::move(vars)), home.path());
    EXPECT_FALSE(r.has_value());
    return r ? std::string() : r.error().message();
  };
  auto both = LoadS3Config(env({{"AWS_PROFILE", "both"}}), home.path());
  ASSERT_TRUE(both.has_value()) << both.error().ToString();
  EXPECT_EQ(both->credentials->Current()->access_key, "FILE");
  EXPECT_NE(message({{"AWS_PROFILE", "assume"}}).find("export-credentials --profile assume"),
            std::string::npos);
  EXPECT_NE(message({{"AWS_PROFILE", "irsa"}}).find("role_arn in profile 'irsa'"),
            std::string::npos);
  EXPECT_NE(message({{"AWS_PROFILE", "nobody"},
                     {"AWS_METADATA_SERVICE_TIMEOUT", "soon"},
                     {"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:9/creds"}})
                .find("AWS_METADATA_SERVICE_TIMEOUT"),
            std::string::npos);
  // The container endpoint: plain http only to loopback and the agents' addresses (the token
  // must not cross a network in clear text); a token with a line break is refused.
  EXPECT_NE(message({{"AWS_PROFILE", "nobody"},
                     {"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://10.1.2.3/creds"}})
                .find("plain http only to loopback"),
            std::string::npos);
  EXPECT_NE(message({{"AWS_PROFILE", "nobody"},
                     {"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:9/creds"},
                     {"AWS_CONTAINER_AUTHORIZATION_TOKEN", "a\r\nX-Injected: 1"}})
                .find("line break"),
            std::string::npos);
  EXPECT_NE(message({{"AWS_PROFILE", "nobody"},
                     {"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:9/creds"}})
                .find("the container credentials endpoint http://127.0.0.1:9/creds"),
            std::string::npos);
  EXPECT_NE(message({{"AWS_PROFILE", "sso"}}).find("AWS SSO"), std::string::npos);
  EXPECT_NE(message({{"AWS_PROFILE", "broken"}}).find("'false' exited with 1"), std::string::npos);
  EXPECT_NE(message({{"AWS_ACCESS_KEY_ID", "only"}}).find("set together"), std::string::npos);
  EXPECT_NE(message({{"AWS_WEB_IDENTITY_TOKEN_FILE", "/t"}}).find("AWS_ROLE_ARN"),
            std::string::npos);
  EXPECT_NE(message({{"AWS_PROFILE", "nobody"}}).find("no S3 credentials"), std::string::npos);
  EXPECT_NE(message({{"AWS_PROFILE", "nobody"},
                     {"AWS_CONTAINER_CREDENTIALS_FULL_URI", "file:///etc/passwd"}})
                .find("must start with http"),
            std::string::npos);
  // A web identity token file that is not there: named at open.
  EXPECT_NE(message({{"AWS_WEB_IDENTITY_TOKEN_FILE", home.Join("none")},
                     {"AWS_ROLE_ARN", "arn:aws:iam::1:role/r"},
                     {"AWS_ENDPOINT_URL_STS", "http://127.0.0.1:9"}})
                .find("token file"),
            std::string::npos);
}

}  // namespace
}  // namespace stoker::s3
