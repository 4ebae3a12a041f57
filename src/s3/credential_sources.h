// The sources of temporary S3 credentials the AWS SDKs read, each a CredentialProvider::Fetch
// that fetches a fresh set (credentials.h refreshes them). s3_config.cc decides which one a
// configuration names, in the SDKs' order. The HTTP ones try again, a second apart, when the
// failure may pass (no connection, a timeout, a 5xx): the container endpoint and STS 3 times,
// the instance metadata service AWS_METADATA_SERVICE_NUM_ATTEMPTS times (default 1), as botocore.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "s3/credentials.h"

namespace stoker::s3 {

// A file's whole text ("" when it cannot be read: a missing ~/.aws file is no file); text
// without its leading and trailing blanks and line ends. The AWS files and the token files.
std::string ReadTextFile(const std::string& path);
std::string TrimBlanks(std::string_view s);

// A profile's `credential_process`: the command line run by /bin/sh, its standard output the
// credential_process JSON (credentials.h). A command that fails is an error naming its exit
// status and the end of what it wrote to standard error. One that takes longer than `timeout`
// (the Go SDK's default: a minute) or writes more than 1 MiB is killed with its process group
// (a helper waiting for a login, or a background process it left holding its output).
inline constexpr std::chrono::milliseconds kCredentialProcessTimeout{60000};
CredentialProvider::Fetch ProcessCredentials(
    std::string command, std::chrono::milliseconds timeout = kCredentialProcessTimeout);

// The ECS / EKS Pod Identity container endpoint: GET `url`, with "Authorization: TOKEN" where
// a token (or a file holding one, read at each fetch: it is rotated) is given.
struct ContainerEndpoint {
  std::string url;
  std::string authorization_token;
  std::string authorization_token_file;
};
CredentialProvider::Fetch ContainerCredentials(ContainerEndpoint endpoint,
                                               std::chrono::milliseconds timeout);

// The EC2 instance metadata service: IMDSv2 (a session token from PUT /latest/api/token), and
// IMDSv1 where the token request is refused (403, 404, 405: a service without sessions) unless
// v1 is disabled; the instance's role from /latest/meta-data/iam/security-credentials/ (404:
// the instance has no role), then its credentials.
struct InstanceMetadata {
  std::string endpoint;  // "http://169.254.169.254"
  std::chrono::milliseconds timeout{1000};
  int attempts = 1;          // AWS_METADATA_SERVICE_NUM_ATTEMPTS
  bool v1_disabled = false;  // AWS_EC2_METADATA_V1_DISABLED
};
CredentialProvider::Fetch InstanceMetadataCredentials(InstanceMetadata imds);

// STS AssumeRoleWithWebIdentity (EKS IRSA and other OIDC federations): the token file (read at
// each fetch: Kubernetes rotates it) exchanged for the role's credentials at `sts_endpoint`.
struct WebIdentity {
  std::string token_file;
  std::string role_arn;
  std::string session_name;
  std::string sts_endpoint;  // "https://sts.REGION.amazonaws.com"
};
CredentialProvider::Fetch WebIdentityCredentials(WebIdentity identity,
                                                 std::chrono::milliseconds timeout);

}  // namespace stoker::s3
