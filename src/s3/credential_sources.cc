#include "s3/credential_sources.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "common/retry.h"
#include "http/http_client.h"
#include "s3/sigv4.h"

extern char** environ;

namespace stoker::s3 {
namespace {

// What a credential source may answer with at most: a credential document is a few KB.
constexpr size_t kMaxAnswer = 1 << 20;

struct ProcessOutput {
  int exit_status = 0;  // waitpid's status
  std::string out, err;
};

// Spawns `/bin/sh -c command` in a process group of its own, with the default signal
// dispositions and an empty signal mask (whatever thread of ours runs it), standard input from
// /dev/null and standard output and error into the pipes.
Result<pid_t> Spawn(const std::string& command, int out_fd, int err_fd) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_fd, 1);
  posix_spawn_file_actions_adddup2(&actions, err_fd, 2);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setsigdefault(&attributes, &all);
  posix_spawnattr_setpgroup(&attributes, 0);
  posix_spawnattr_setflags(&attributes,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  const char* argv[] = {"/bin/sh", "-c", command.c_str(), nullptr};
  pid_t pid = 0;
  const int spawned =
      posix_spawn(&pid, "/bin/sh", &actions, &attributes, const_cast<char* const*>(argv), environ);
  posix_spawnattr_destroy(&attributes);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) return Err(Status::FromErrno(spawned, "running /bin/sh"));
  return pid;
}

// Reads the two pipes until both end, the output passes kMaxAnswer, or the deadline: "" or
// what went wrong.
std::string Collect(int out_fd, int err_fd, std::chrono::milliseconds timeout,
                    ProcessOutput& result) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
  std::string* into[2] = {&result.out, &result.err};
  int open_pipes = 2;
  char buffer[16384];
  while (open_pipes > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return fmt::format("did not finish within {:.1f} s", timeout.count() / 1000.0);
    }
    const int ready = poll(fds, 2, static_cast<int>(left.count()));
    if (ready < 0 && errno != EINTR) return fmt::format("poll: {}", std::strerror(errno));
    for (int i = 0; i < 2 && ready > 0; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t n = read(fds[i].fd, buffer, sizeof(buffer));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        fds[i].fd = -1;
        --open_pipes;
        continue;
      }
      into[i]->append(buffer, static_cast<size_t>(n));
      if (into[i]->size() > kMaxAnswer) {
        return fmt::format("wrote more than {} bytes", kMaxAnswer);
      }
    }
  }
  return "";
}

// Runs `command` (Spawn) and collects its standard output and error. A command that takes too
// long or writes too much is killed with its whole process group.
Result<ProcessOutput> RunCommand(const std::string& command, std::chrono::milliseconds timeout) {
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return Err(Status::FromErrno(errno, "pipe"));
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    const int e = errno;
    close(out_pipe[0]);
    close(out_pipe[1]);
    return Err(Status::FromErrno(e, "pipe"));
  }
  auto pid = Spawn(command, out_pipe[1], err_pipe[1]);
  close(out_pipe[1]);
  close(err_pipe[1]);
  ProcessOutput result;
  std::string failure;
  if (pid) {
    failure = Collect(out_pipe[0], err_pipe[0], timeout, result);
    if (!failure.empty()) kill(-*pid, SIGKILL);
  }
  close(out_pipe[0]);
  close(err_pipe[0]);
  if (!pid) return Err(pid.error());
  pid_t waited = 0;
  while ((waited = waitpid(*pid, &result.exit_status, 0)) < 0 && errno == EINTR) {
  }
  if (!failure.empty()) {
    return Err(Status::Unavailable(fmt::format("'{}' {}: stopped", command, failure)));
  }
  if (waited < 0) return Err(Status::FromErrno(errno, fmt::format("waiting for '{}'", command)));
  return result;
}

// The last non-empty line of a process's standard error: what it says went wrong.
std::string LastLine(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.remove_suffix(1);
  const size_t newline = text.rfind('\n');
  return std::string(newline == std::string_view::npos ? text : text.substr(newline + 1));
}

// An endpoint's answer other than 200 as an error naming it: a server error or throttling is
// worth another attempt (Unavailable), a refusal is not.
Status AnswerError(const http::Request& request, const http::Response& response) {
  const std::string text = fmt::format("{}: HTTP {} {}", request.where, response.status,
                                       TrimBlanks(response.body.substr(0, 300)));
  if (response.status >= 500 || response.status == 429) return Status::Unavailable(text);
  if (response.status == 404) return Status::NotFound(text);
  if (response.status == 401 || response.status == 403) return Status::PermissionDenied(text);
  return Status::InvalidArgument(text);
}

// One request to a credential endpoint; an answer other than 200 is an error naming it.
Result<std::string> Fetch200(http::Client& client, const http::Request& request) {
  STOKER_ASSIGN_OR_RETURN(http::Response response, client.Perform(request));
  if (response.status != 200) return Err(AnswerError(request, response));
  return std::move(response.body);
}

// `fetch` tried up to `attempts` times while it fails for a reason that may pass (no
// connection, a timeout, a server error), a second apart: the SDKs' retries of these endpoints.
CredentialProvider::Fetch WithAttempts(CredentialProvider::Fetch fetch, int attempts) {
  return [fetch = std::move(fetch), attempts]() -> Result<TimedCredentials> {
    Retry retry(RetryPolicy{.max_attempts = attempts,
                            .base_backoff = std::chrono::milliseconds(1000),
                            .max_backoff = std::chrono::milliseconds(1000)});
    Status last;
    while (retry.Next(last)) {
      auto fetched = fetch();
      if (fetched) return fetched;
      last = fetched.error();
    }
    return Err(last);
  };
}

}  // namespace

std::string ReadTextFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string TrimBlanks(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

CredentialProvider::Fetch ProcessCredentials(std::string command,
                                             std::chrono::milliseconds timeout) {
  return [command = std::move(command), timeout]() -> Result<TimedCredentials> {
    STOKER_ASSIGN_OR_RETURN(ProcessOutput run, RunCommand(command, timeout));
    if (!WIFEXITED(run.exit_status) || WEXITSTATUS(run.exit_status) != 0) {
      const std::string how =
          WIFEXITED(run.exit_status)
              ? fmt::format("exited with {}", WEXITSTATUS(run.exit_status))
              : fmt::format("was killed by signal {}", WTERMSIG(run.exit_status));
      const std::string said = LastLine(run.err);
      return Err(Status::Unavailable(
          fmt::format("'{}' {}{}{}", command, how, said.empty() ? "" : ": ", said)));
    }
    return ParseCredentialJson(run.out, fmt::format("the output of '{}'", command));
  };
}

CredentialProvider::Fetch ContainerCredentials(ContainerEndpoint endpoint,
                                               std::chrono::milliseconds timeout) {
  auto client = http::Client::Create(timeout);
  return WithAttempts(
      [endpoint = std::move(endpoint), client]() -> Result<TimedCredentials> {
        http::Request request;
        request.url = endpoint.url;
        request.where = "GET " + endpoint.url;
        std::string token = endpoint.authorization_token;
        if (!endpoint.authorization_token_file.empty()) {
          token = TrimBlanks(ReadTextFile(endpoint.authorization_token_file));
          if (token.find_first_of("\r\n") != std::string::npos) {
            return Err(Status::InvalidArgument(
                fmt::format("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE '{}' holds more than one line",
                            endpoint.authorization_token_file)));
          }
          if (token.empty()) {
            return Err(Status::InvalidArgument(
                fmt::format("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE '{}' is missing or empty",
                            endpoint.authorization_token_file)));
          }
        }
        if (!token.empty()) request.header_lines.push_back("Authorization: " + token);
        STOKER_ASSIGN_OR_RETURN(std::string body, Fetch200(*client, request));
        return ParseCredentialJson(body, request.where);
      },
      3);  // botocore's container fetcher: 3 attempts
}

CredentialProvider::Fetch InstanceMetadataCredentials(InstanceMetadata imds) {
  auto client = http::Client::Create(imds.timeout);
  const int attempts = imds.attempts;
  return WithAttempts(
      [imds = std::move(imds), client]() -> Result<TimedCredentials> {
        http::Request token_request;
        token_request.method = "PUT";
        token_request.url = imds.endpoint + "/latest/api/token";
        token_request.where = "PUT " + token_request.url;
        token_request.header_lines.push_back("X-aws-ec2-metadata-token-ttl-seconds: 21600");
        STOKER_ASSIGN_OR_RETURN(http::Response token_answer, client->Perform(token_request));
        std::vector<std::string> headers;
        const long status = token_answer.status;
        if (status == 200) {
          headers.push_back("X-aws-ec2-metadata-token: " + TrimBlanks(token_answer.body));
        } else if (imds.v1_disabled || (status != 403 && status != 404 && status != 405)) {
          return Err(Status::Unavailable(
              fmt::format("{}: HTTP {}{}", token_request.where, status,
                          imds.v1_disabled ? " (and IMDSv1 is disabled)" : "")));
        }
        const std::string roles_url = imds.endpoint + "/latest/meta-data/iam/security-credentials/";
        http::Request roles{.url = roles_url, .where = "GET " + roles_url, .header_lines = headers};
        STOKER_ASSIGN_OR_RETURN(http::Response role_answer, client->Perform(roles));
        const std::string role =
            TrimBlanks(std::string_view(role_answer.body).substr(0, role_answer.body.find('\n')));
        if (role_answer.status == 404 || (role_answer.status == 200 && role.empty())) {
          return Err(Status::NotFound(
              fmt::format("{}: the instance has no IAM role (instance profile)", roles.where)));
        }
        if (role_answer.status != 200) return Err(AnswerError(roles, role_answer));
        http::Request credentials{
            .url = roles_url + role, .where = "GET " + roles_url + role, .header_lines = headers};
        STOKER_ASSIGN_OR_RETURN(std::string body, Fetch200(*client, credentials));
        return ParseCredentialJson(body, credentials.where);
      },
      attempts);
}

CredentialProvider::Fetch WebIdentityCredentials(WebIdentity identity,
                                                 std::chrono::milliseconds timeout) {
  auto client = http::Client::Create(timeout);
  return WithAttempts(
      [identity = std::move(identity), client]() -> Result<TimedCredentials> {
        const std::string token = TrimBlanks(ReadTextFile(identity.token_file));
        if (token.empty()) {
          return Err(Status::InvalidArgument(fmt::format(
              "the web identity token file '{}' is missing or empty", identity.token_file)));
        }
        // An unsigned call: the token is the proof.
        const std::string form = CanonicalQuery({{"Action", "AssumeRoleWithWebIdentity"},
                                                 {"Version", "2011-06-15"},
                                                 {"RoleArn", identity.role_arn},
                                                 {"RoleSessionName", identity.session_name},
                                                 {"WebIdentityToken", token}});
        http::Request request;
        request.method = "POST";
        request.url = identity.sts_endpoint + "/";
        request.where = fmt::format("AssumeRoleWithWebIdentity at {} (role {})",
                                    identity.sts_endpoint, identity.role_arn);
        request.header_lines = {"Content-Type: application/x-www-form-urlencoded",
                                "Accept: application/xml"};
        request.body = std::as_bytes(std::span(form));
        STOKER_ASSIGN_OR_RETURN(std::string body, Fetch200(*client, request));
        return ParseStsCredentials(body, request.where);
      },
      3);  // as the SDKs' standard retries of STS
}

}  // namespace stoker::s3
