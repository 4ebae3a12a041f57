// The sources of temporary S3 credentials the AWS SDKs read, each a CredentialProvider::Fetch
// that fetches a fresh set (credentials.h refreshes them). s3_config.cc decides which one a
// configuration names, in the SDKs' order.
#pragma once

#include <chrono>
#include <string>

#include "s3/credentials.h"

namespace stoker::s3 {

// A profile's `credential_process`: the command line run by /bin/sh, its standard output the
// credential_process JSON (credentials.h). A command that fails is an error naming its exit
// status and the end of what it wrote to standard error.
CredentialProvider::Fetch ProcessCredentials(std::string command);

// The ECS / EKS Pod Identity container endpoint: GET `url`, with "Authorization: TOKEN" where
// a token (or a file holding one, read at each fetch: it is rotated) is given.
struct ContainerEndpoint {
  std::string url;
  std::string authorization_token;
  std::string authorization_token_file;
};
CredentialProvider::Fetch ContainerCredentials(ContainerEndpoint endpoint,
                                               std::chrono::milliseconds timeout);

// The EC2 instance metadata service at `endpoint` ("http://169.254.169.254"): IMDSv2 (a session
// token from PUT /latest/api/token), IMDSv1 where the service does not know tokens; the
// instance's role from /latest/meta-data/iam/security-credentials/, then its credentials.
CredentialProvider::Fetch InstanceMetadataCredentials(std::string endpoint,
                                                      std::chrono::milliseconds timeout);

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
