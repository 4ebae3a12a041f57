#include "s3/s3_config.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include <fmt/format.h>

#include "common/parse_number.h"
#include "s3/credential_sources.h"

extern char** environ;

namespace stoker::s3 {
namespace {

std::string Get(const std::map<std::string, std::string>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? "" : it->second;
}

// Bucket names: 3-63 characters of lower-case letters, digits, '.' and '-' (AWS's rules; S3
// compatible stores accept at least these).
bool ValidBucket(std::string_view b) {
  if (b.size() < 3 || b.size() > 63) return false;
  for (char c : b) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-')) return false;
  }
  return b.front() != '.' && b.front() != '-' && b.back() != '.' && b.back() != '-';
}

}  // namespace

Result<S3Location> ParseS3Uri(std::string_view uri) {
  if (!uri.starts_with(kS3Scheme)) {
    return Err(Status::InvalidArgument(fmt::format("'{}' is not an s3:// URI", uri)));
  }
  std::string_view rest = uri.substr(kS3Scheme.size());
  const size_t slash = rest.find('/');
  S3Location loc;
  loc.bucket = std::string(rest.substr(0, slash));
  if (!ValidBucket(loc.bucket)) {
    return Err(Status::InvalidArgument(
        fmt::format("'{}': bad bucket name '{}' (3-63 of a-z 0-9 . -)", uri, loc.bucket)));
  }
  std::string_view prefix = slash == std::string_view::npos ? "" : rest.substr(slash + 1);
  while (prefix.ends_with('/')) prefix.remove_suffix(1);
  if (prefix.find("//") != std::string_view::npos) {
    return Err(Status::InvalidArgument(fmt::format("'{}': empty path component", uri)));
  }
  loc.prefix = std::string(prefix);
  return loc;
}

std::map<std::string, std::map<std::string, std::string>> ParseIni(std::string_view text) {
  std::map<std::string, std::map<std::string, std::string>> out;
  std::string section;
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    const std::string t = TrimBlanks(line);
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;
    if (t.front() == '[' && t.back() == ']') {
      section = TrimBlanks(std::string_view(t).substr(1, t.size() - 2));
      // ~/.aws/config names profiles "[profile NAME]" (except "default").
      if (section.starts_with("profile ")) section = TrimBlanks(section.substr(8));
      continue;
    }
    const size_t eq = t.find('=');
    if (eq == std::string::npos || section.empty()) continue;
    out[section][TrimBlanks(std::string_view(t).substr(0, eq))] =
        TrimBlanks(std::string_view(t).substr(eq + 1));
  }
  return out;
}

namespace {

// What the credential chain reads: the environment, the profile's settings, the region.
struct CredentialSettings {
  const std::map<std::string, std::string>& env;
  std::string profile;
  std::string credentials_file;
  std::string config_file;
  std::map<std::string, std::string> in_credentials_file;  // the profile's section
  std::map<std::string, std::string> in_config_file;
  std::string region;
};

// botocore's setting (whole seconds, default 1): the instance metadata and container endpoints.
Result<std::chrono::milliseconds> MetadataTimeout(const CredentialSettings& s) {
  const std::string text = Get(s.env, "AWS_METADATA_SERVICE_TIMEOUT");
  if (text.empty()) return std::chrono::milliseconds(1000);
  const auto seconds = ParseUnsigned<uint32_t>(text);
  if (!seconds || *seconds == 0 || *seconds > 3600) {
    return Err(Status::InvalidArgument(fmt::format(
        "AWS_METADATA_SERVICE_TIMEOUT '{}' must be a number of seconds from 1 to 3600", text)));
  }
  return std::chrono::milliseconds(*seconds * 1000LL);
}

bool IsTrue(std::string value) {
  std::transform(value.begin(), value.end(), value.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return value == "true";
}

Result<std::shared_ptr<CredentialProvider>> WebIdentityProvider(const CredentialSettings& s,
                                                                std::string token_file,
                                                                std::string role_arn,
                                                                std::string session_name) {
  if (role_arn.empty()) {
    return Err(Status::InvalidArgument(fmt::format(
        "a web identity token file ('{}') needs the role to assume: set AWS_ROLE_ARN, or "
        "role_arn in profile '{}'",
        token_file, s.profile)));
  }
  std::string sts = Get(s.env, "AWS_ENDPOINT_URL_STS");
  if (sts.empty()) sts = Get(s.env, "AWS_ENDPOINT_URL");
  if (sts.empty()) {
    // STS's regional endpoints; the China regions have their own domain.
    sts = "https://sts." + s.region + ".amazonaws.com" + (s.region.starts_with("cn-") ? ".cn" : "");
  }
  while (sts.ends_with('/')) sts.pop_back();
  if (session_name.empty()) session_name = fmt::format("stoker-{}", getpid());
  const std::string source = fmt::format("web identity token '{}' (role {})", token_file, role_arn);
  return CredentialProvider::Refreshing(
      WebIdentityCredentials(
          {std::move(token_file), std::move(role_arn), std::move(session_name), std::move(sts)},
          std::chrono::seconds(10)),
      source);
}

// A profile's keys in one of the two files; null if it has none there.
Result<std::shared_ptr<CredentialProvider>> ProfileKeys(
    const CredentialSettings& s, const std::map<std::string, std::string>& section,
    const std::string& file) {
  const std::string key = Get(section, "aws_access_key_id");
  const std::string secret = Get(section, "aws_secret_access_key");
  if (key.empty() && secret.empty()) return std::shared_ptr<CredentialProvider>();
  if (key.empty() || secret.empty()) {
    return Err(Status::InvalidArgument(fmt::format(
        "profile '{}' in {} has only one of aws_access_key_id and aws_secret_access_key", s.profile,
        file)));
  }
  return CredentialProvider::Fixed({key, secret, Get(section, "aws_session_token")},
                                   fmt::format("profile '{}' in {}", s.profile, file));
}

// Profiles stoker does not speak: refused by name rather than passed over for another identity
// (the AWS CLI bridges them: its export-credentials speaks credential_process).
Status RefuseUnspokenProfile(const CredentialSettings& s) {
  const auto& config = s.in_config_file;
  const std::string bridge = fmt::format(
      "which stoker does not do itself: give another profile credential_process = aws configure "
      "export-credentials --profile {} --format process, and use that one",
      s.profile);
  if (!Get(config, "role_arn").empty() && Get(config, "web_identity_token_file").empty()) {
    return Status::Unsupported(fmt::format(
        "profile '{}' assumes a role (role_arn with source_profile or credential_source), {}",
        s.profile, bridge));
  }
  if (!Get(config, "sso_session").empty() || !Get(config, "sso_start_url").empty()) {
    return Status::Unsupported(
        fmt::format("profile '{}' signs in with AWS SSO, {}", s.profile, bridge));
  }
  return Status::OK();
}

// The ECS / EKS Pod Identity endpoint, if the container's environment names one. Plain http
// only to the container agents' addresses and loopback (as the AWS SDKs): the authorization
// token must not cross a network in clear text.
Result<std::shared_ptr<CredentialProvider>> ContainerProvider(const CredentialSettings& s) {
  ContainerEndpoint endpoint;
  if (const std::string relative = Get(s.env, "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
      !relative.empty()) {
    endpoint.url = "http://169.254.170.2" + relative;
  } else {
    endpoint.url = Get(s.env, "AWS_CONTAINER_CREDENTIALS_FULL_URI");
  }
  if (endpoint.url.empty()) return std::shared_ptr<CredentialProvider>();
  if (endpoint.url.starts_with("http://")) {
    std::string_view host = std::string_view(endpoint.url).substr(7);
    host = host.substr(0, host.find('/'));
    if (!host.starts_with('['))
      host = host.substr(0, host.find(':'));
    else
      host = host.substr(0, host.find(']') + 1);
    const bool allowed = host == "169.254.170.2" || host == "169.254.170.23" ||
                         host == "[fd00:ec2::23]" || host == "localhost" || host == "[::1]" ||
                         host.starts_with("127.");
    if (!allowed) {
      return Err(Status::InvalidArgument(fmt::format(
          "AWS_CONTAINER_CREDENTIALS_FULL_URI '{}': plain http only to loopback or the container "
          "agent (169.254.170.2, 169.254.170.23, fd00:ec2::23); use https",
          endpoint.url)));
    }
  } else if (!endpoint.url.starts_with("https://")) {
    return Err(Status::InvalidArgument(
        fmt::format("AWS_CONTAINER_CREDENTIALS_FULL_URI '{}' must start with http:// or https://",
                    endpoint.url)));
  }
  endpoint.authorization_token = Get(s.env, "AWS_CONTAINER_AUTHORIZATION_TOKEN");
  endpoint.authorization_token_file = Get(s.env, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
  if (endpoint.authorization_token.find_first_of("\r\n") != std::string::npos) {
    return Err(Status::InvalidArgument("AWS_CONTAINER_AUTHORIZATION_TOKEN holds a line break"));
  }
  STOKER_ASSIGN_OR_RETURN(const auto timeout, MetadataTimeout(s));
  const std::string source = "the container credentials endpoint " + endpoint.url;
  return CredentialProvider::Refreshing(ContainerCredentials(endpoint, timeout), source);
}

Result<std::shared_ptr<CredentialProvider>> InstanceProvider(const CredentialSettings& s,
                                                             const std::string& none) {
  if (IsTrue(Get(s.env, "AWS_EC2_METADATA_DISABLED"))) {
    return Err(Status::InvalidArgument(none));
  }
  InstanceMetadata imds;
  imds.endpoint = Get(s.env, "AWS_EC2_METADATA_SERVICE_ENDPOINT");
  if (imds.endpoint.empty()) imds.endpoint = Get(s.in_config_file, "ec2_metadata_service_endpoint");
  if (imds.endpoint.empty()) imds.endpoint = "http://169.254.169.254";
  while (imds.endpoint.ends_with('/')) imds.endpoint.pop_back();
  imds.v1_disabled = IsTrue(Get(s.env, "AWS_EC2_METADATA_V1_DISABLED")) ||
                     IsTrue(Get(s.in_config_file, "ec2_metadata_v1_disabled"));
  STOKER_ASSIGN_OR_RETURN(imds.timeout, MetadataTimeout(s));
  if (const std::string text = Get(s.env, "AWS_METADATA_SERVICE_NUM_ATTEMPTS"); !text.empty()) {
    const auto attempts = ParseUnsigned<uint32_t>(text);
    if (!attempts || *attempts == 0 || *attempts > 10) {
      return Err(Status::InvalidArgument(fmt::format(
          "AWS_METADATA_SERVICE_NUM_ATTEMPTS '{}' must be a number from 1 to 10", text)));
    }
    imds.attempts = static_cast<int>(*attempts);
  }
  const std::string source = "the EC2 instance metadata service at " + imds.endpoint;
  auto provider = CredentialProvider::Refreshing(InstanceMetadataCredentials(imds), source);
  if (!provider) {
    return Err(Status::InvalidArgument(fmt::format("{}; on EC2, give the instance an IAM role ({})",
                                                   none, provider.error().message())));
  }
  return provider;
}

// Every source in the AWS SDKs' (botocore's) order; the first one configured is used (a
// configured source that fails is an error, not a reason to try the next: the job would run as
// someone else).
Result<std::shared_ptr<CredentialProvider>> LoadCredentials(const CredentialSettings& s) {
  const std::string key = Get(s.env, "AWS_ACCESS_KEY_ID");
  const std::string secret = Get(s.env, "AWS_SECRET_ACCESS_KEY");
  if (!key.empty() || !secret.empty()) {
    if (key.empty() || secret.empty()) {
      return Err(Status::InvalidArgument(
          "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set together"));
    }
    return CredentialProvider::Fixed({key, secret, Get(s.env, "AWS_SESSION_TOKEN")},
                                     "the environment (AWS_ACCESS_KEY_ID)");
  }
  STOKER_RETURN_IF_ERROR(RefuseUnspokenProfile(s));
  const auto& config = s.in_config_file;
  if (const std::string token_file = Get(s.env, "AWS_WEB_IDENTITY_TOKEN_FILE");
      !token_file.empty()) {
    return WebIdentityProvider(s, token_file, Get(s.env, "AWS_ROLE_ARN"),
                               Get(s.env, "AWS_ROLE_SESSION_NAME"));
  }
  if (const std::string token_file = Get(config, "web_identity_token_file"); !token_file.empty()) {
    return WebIdentityProvider(s, token_file, Get(config, "role_arn"),
                               Get(config, "role_session_name"));
  }
  STOKER_ASSIGN_OR_RETURN(auto from_file,
                          ProfileKeys(s, s.in_credentials_file, s.credentials_file));
  if (from_file) return from_file;
  if (const std::string command = Get(config, "credential_process"); !command.empty()) {
    return CredentialProvider::Refreshing(
        ProcessCredentials(command), fmt::format("credential_process of profile '{}'", s.profile));
  }
  STOKER_ASSIGN_OR_RETURN(auto from_config, ProfileKeys(s, config, s.config_file));
  if (from_config) return from_config;
  STOKER_ASSIGN_OR_RETURN(auto from_container, ContainerProvider(s));
  if (from_container) return from_container;
  return InstanceProvider(
      s, fmt::format("no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or put "
                     "profile '{}' in {} (keys or credential_process), or give a web identity "
                     "(AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN)",
                     s.profile, s.credentials_file));
}

}  // namespace

Result<S3Config> LoadS3Config(const std::map<std::string, std::string>& env,
                              const std::string& home) {
  S3Config c;
  std::string profile = Get(env, "AWS_PROFILE");
  if (profile.empty()) profile = "default";
  const std::string credentials_file = Get(env, "AWS_SHARED_CREDENTIALS_FILE").empty()
                                           ? home + "/.aws/credentials"
                                           : Get(env, "AWS_SHARED_CREDENTIALS_FILE");
  const std::string config_file =
      Get(env, "AWS_CONFIG_FILE").empty() ? home + "/.aws/config" : Get(env, "AWS_CONFIG_FILE");
  const auto credentials = ParseIni(ReadTextFile(credentials_file));
  const auto config = ParseIni(ReadTextFile(config_file));
  auto from_profile = [&](const std::string& key) {
    std::string v;
    if (auto s = credentials.find(profile); s != credentials.end()) v = Get(s->second, key);
    if (v.empty()) {
      if (auto s = config.find(profile); s != config.end()) v = Get(s->second, key);
    }
    return v;
  };

  for (const char* key : {"AWS_REGION", "AWS_DEFAULT_REGION"}) {
    if (c.region = Get(env, key); !c.region.empty()) break;
  }
  if (c.region.empty()) c.region = from_profile("region");
  if (c.region.empty()) c.region = "us-east-1";

  CredentialSettings settings{.env = env,
                              .profile = profile,
                              .credentials_file = credentials_file,
                              .config_file = config_file,
                              .in_credentials_file = {},
                              .in_config_file = {},
                              .region = c.region};
  if (auto it = credentials.find(profile); it != credentials.end()) {
    settings.in_credentials_file = it->second;
  }
  if (auto it = config.find(profile); it != config.end()) settings.in_config_file = it->second;
  STOKER_ASSIGN_OR_RETURN(c.credentials, LoadCredentials(settings));

  c.endpoint = Get(env, "AWS_ENDPOINT_URL_S3");
  if (c.endpoint.empty()) c.endpoint = Get(env, "AWS_ENDPOINT_URL");
  if (c.endpoint.empty()) c.endpoint = from_profile("endpoint_url");
  if (c.endpoint.empty()) {
    c.endpoint = "https://s3." + c.region + ".amazonaws.com";
  } else {
    if (!c.endpoint.starts_with("http://") && !c.endpoint.starts_with("https://")) {
      return Err(Status::InvalidArgument(
          fmt::format("endpoint '{}' must start with http:// or https://", c.endpoint)));
    }
    while (c.endpoint.ends_with('/')) c.endpoint.pop_back();
    c.path_style = true;
  }

  std::string attempts = Get(env, "AWS_MAX_ATTEMPTS");
  if (attempts.empty()) attempts = from_profile("max_attempts");
  if (!attempts.empty()) {
    char* end = nullptr;
    const long n = std::strtol(attempts.c_str(), &end, 10);
    if (*end != '\0' || n < 1 || n > 100) {
      return Err(Status::InvalidArgument(
          fmt::format("AWS_MAX_ATTEMPTS '{}' must be a number from 1 to 100", attempts)));
    }
    c.max_attempts = static_cast<int>(n);
  }
  std::string mode = Get(env, "AWS_RETRY_MODE");
  if (mode.empty()) mode = from_profile("retry_mode");
  if (!mode.empty()) {
    if (mode != "legacy" && mode != "standard" && mode != "adaptive") {
      return Err(Status::InvalidArgument(
          fmt::format("AWS_RETRY_MODE '{}' must be legacy, standard or adaptive", mode)));
    }
    c.retry_mode = mode;
    // As the AWS SDKs: legacy mode's default is 5 attempts, the others 3.
    if (attempts.empty() && mode == "legacy") c.max_attempts = 5;
  }
  return c;
}

Result<S3Config> LoadS3ConfigFromEnvironment(const std::map<std::string, std::string>& overrides) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view kv(*e);
    if (!kv.starts_with("AWS_")) continue;
    const size_t eq = kv.find('=');
    if (eq != std::string_view::npos) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  for (const auto& [name, value] : overrides) env[name] = value;
  const char* home = std::getenv("HOME");
  return LoadS3Config(env, home != nullptr ? home : "");
}

}  // namespace stoker::s3
