#include "s3/s3_config.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

extern char** environ;

namespace stoker::s3 {
namespace {

std::string Trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r");
  return std::string(s.substr(b, e - b + 1));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

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
    const std::string t = Trim(line);
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;
    if (t.front() == '[' && t.back() == ']') {
      section = Trim(std::string_view(t).substr(1, t.size() - 2));
      // ~/.aws/config names profiles "[profile NAME]" (except "default").
      if (section.starts_with("profile ")) section = Trim(section.substr(8));
      continue;
    }
    const size_t eq = t.find('=');
    if (eq == std::string::npos || section.empty()) continue;
    out[section][Trim(std::string_view(t).substr(0, eq))] =
        Trim(std::string_view(t).substr(eq + 1));
  }
  return out;
}

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
  const auto credentials = ParseIni(ReadFile(credentials_file));
  const auto config = ParseIni(ReadFile(config_file));
  auto from_profile = [&](const std::string& key) {
    std::string v;
    if (auto s = credentials.find(profile); s != credentials.end()) v = Get(s->second, key);
    if (v.empty()) {
      if (auto s = config.find(profile); s != config.end()) v = Get(s->second, key);
    }
    return v;
  };

  c.credentials.access_key = Get(env, "AWS_ACCESS_KEY_ID");
  c.credentials.secret_key = Get(env, "AWS_SECRET_ACCESS_KEY");
  c.credentials.session_token = Get(env, "AWS_SESSION_TOKEN");
  if (c.credentials.access_key.empty() && c.credentials.secret_key.empty()) {
    c.credentials.access_key = from_profile("aws_access_key_id");
    c.credentials.secret_key = from_profile("aws_secret_access_key");
    c.credentials.session_token = from_profile("aws_session_token");
  }
  if (c.credentials.access_key.empty() || c.credentials.secret_key.empty()) {
    return Err(Status::InvalidArgument(fmt::format(
        "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or put profile "
        "'{}' in {}",
        profile, credentials_file)));
  }

  for (const char* key : {"AWS_REGION", "AWS_DEFAULT_REGION"}) {
    if (c.region = Get(env, key); !c.region.empty()) break;
  }
  if (c.region.empty()) c.region = from_profile("region");
  if (c.region.empty()) c.region = "us-east-1";

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
