// Where an s3:// dataset lives and how to reach it, following the AWS conventions users already
// have configured (docs/s3.md has the whole table): credentials from the environment, a profile
// (AWS_PROFILE, default "default") in ~/.aws/credentials or ~/.aws/config (keys,
// credential_process, a web identity token), a web identity token (EKS IRSA), the ECS/EKS
// container endpoint or the EC2 instance metadata service, in the AWS SDKs' order, the temporary
// ones refreshed before they expire (credentials.h); AWS_REGION / AWS_DEFAULT_REGION or the
// profile's region; AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL for S3-compatible stores (Ceph RGW,
// MinIO, …), which are addressed path-style; AWS_MAX_ATTEMPTS and AWS_RETRY_MODE (legacy |
// standard | adaptive) for retries.
//
// Values; thread-safe.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "s3/credentials.h"
#include "stoker/status.h"

namespace stoker::s3 {

inline constexpr std::string_view kS3Scheme = "s3://";

struct S3Location {
  std::string bucket;
  std::string prefix;  // no leading or trailing '/'; "" for the bucket's root
};

// "s3://bucket/some/prefix/" -> {bucket, "some/prefix"}. InvalidArgument for a bad bucket name.
Result<S3Location> ParseS3Uri(std::string_view uri);

struct S3Config {
  std::shared_ptr<CredentialProvider> credentials;
  std::string region = "us-east-1";
  // "https://s3.REGION.amazonaws.com" unless an endpoint is configured.
  std::string endpoint;
  bool path_style = false;  // true for configured endpoints (virtual hosts need DNS)
  int max_attempts = 3;     // total tries of one request, the first included
  std::string retry_mode = "standard";
  // A transfer that moves no byte for this long fails (and is retried): the deadline of
  // docs/protocol.md, "Deadlines", from StorageOptions or $STOKER_TIMEOUT.
  std::chrono::milliseconds request_timeout{30000};
};

// Reads the configuration from `env` (name -> value) and the AWS files under `home`.
// InvalidArgument naming the setting when something is set but wrong, or no credentials exist;
// a credential source that is named but fails (a credential_process that exits non-zero, an
// endpoint that does not answer) is that error, naming the source.
Result<S3Config> LoadS3Config(const std::map<std::string, std::string>& env,
                              const std::string& home);
// The same from this process's environment and $HOME, with `overrides` (AWS_* name -> value)
// taking the place of the environment's values.
Result<S3Config> LoadS3ConfigFromEnvironment(
    const std::map<std::string, std::string>& overrides = {});

// Sections of an INI file as ~/.aws/credentials and ~/.aws/config write them:
// "[name]" then "key = value" lines; '#' and ';' start comments.
std::map<std::string, std::map<std::string, std::string>> ParseIni(std::string_view text);

}  // namespace stoker::s3
