#include "s3/credential_sources.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

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

// Runs `/bin/sh -c command` with standard input from /dev/null and collects its standard output
// and error (each kept up to kMaxAnswer; the rest is read and dropped, so the command never
// blocks on a full pipe).
Result<ProcessOutput> RunCommand(const std::string& command) {
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return Err(Status::FromErrno(errno, "pipe"));
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    const int e = errno;
    close(out_pipe[0]);
    close(out_pipe[1]);
    return Err(Status::FromErrno(e, "pipe"));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  const char* argv[] = {"/bin/sh", "-c", command.c_str(), nullptr};
  pid_t pid = 0;
  const int spawned =
      posix_spawn(&pid, "/bin/sh", &actions, nullptr, const_cast<char* const*>(argv), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);
  close(err_pipe[1]);
  ProcessOutput result;
  if (spawned == 0) {
    pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
    std::string* into[2] = {&result.out, &result.err};
    int open_pipes = 2;
    char buffer[16384];
    while (open_pipes > 0) {
      if (poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd < 0 || fds[i].revents == 0) continue;
        const ssize_t n = read(fds[i].fd, buffer, sizeof(buffer));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          fds[i].fd = -1;
          --open_pipes;
          continue;
        }
        const size_t room = kMaxAnswer - std::min(kMaxAnswer, into[i]->size());
        into[i]->append(buffer, std::min(room, static_cast<size_t>(n)));
      }
    }
    while (waitpid(pid, &result.exit_status, 0) < 0 && errno == EINTR) {
    }
  }
  close(out_pipe[0]);
  close(err_pipe[0]);
  if (spawned != 0) return Err(Status::FromErrno(spawned, "running /bin/sh"));
  return result;
}

// The last non-empty line of a process's standard error: what it says went wrong.
std::string LastLine(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.remove_suffix(1);
  const size_t newline = text.rfind('\n');
  return std::string(newline == std::string_view::npos ? text : text.substr(newline + 1));
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string TrimmedLine(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

// One request to a credential endpoint; an answer other than 200 is an error naming it.
Result<std::string> Fetch200(http::Client& client, http::Request request) {
  STOKER_ASSIGN_OR_RETURN(http::Response response, client.Perform(request));
  if (response.status != 200) {
    return Err(Status::Unavailable(fmt::format("{}: HTTP {} {}", request.where, response.status,
                                               TrimmedLine(response.body.substr(0, 300)))));
  }
  return std::move(response.body);
}

}  // namespace

CredentialProvider::Fetch ProcessCredentials(std::string command) {
  return [command = std::move(command)]() -> Result<TimedCredentials> {
    STOKER_ASSIGN_OR_RETURN(ProcessOutput run, RunCommand(command));
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
  return [endpoint = std::move(endpoint), client]() -> Result<TimedCredentials> {
    http::Request request;
    request.url = endpoint.url;
    request.where = "GET " + endpoint.url;
    std::string token = endpoint.authorization_token;
    if (!endpoint.authorization_token_file.empty()) {
      token = TrimmedLine(ReadWholeFile(endpoint.authorization_token_file));
      if (token.empty()) {
        return Err(Status::InvalidArgument(
            fmt::format("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE '{}' is missing or empty",
                        endpoint.authorization_token_file)));
      }
    }
    if (!token.empty()) request.header_lines.push_back("Authorization: " + token);
    STOKER_ASSIGN_OR_RETURN(std::string body, Fetch200(*client, request));
    return ParseCredentialJson(body, request.where);
  };
}

CredentialProvider::Fetch InstanceMetadataCredentials(std::string endpoint,
                                                      std::chrono::milliseconds timeout) {
  auto client = http::Client::Create(timeout);
  return [endpoint = std::move(endpoint), client]() -> Result<TimedCredentials> {
    http::Request token_request;
    token_request.method = "PUT";
    token_request.url = endpoint + "/latest/api/token";
    token_request.where = "PUT " + token_request.url;
    token_request.header_lines.push_back("X-aws-ec2-metadata-token-ttl-seconds: 21600");
    STOKER_ASSIGN_OR_RETURN(http::Response token_answer, client->Perform(token_request));
    std::vector<std::string> headers;
    if (token_answer.status == 200) {
      headers.push_back("X-aws-ec2-metadata-token: " + TrimmedLine(token_answer.body));
    } else if (token_answer.status != 404 && token_answer.status != 405) {
      // 404/405: a service without IMDSv2 sessions (IMDSv1 only). Anything else is a refusal.
      return Err(Status::Unavailable(
          fmt::format("{}: HTTP {}", token_request.where, token_answer.status)));
    }
    const std::string roles_url = endpoint + "/latest/meta-data/iam/security-credentials/";
    http::Request roles{.url = roles_url, .where = "GET " + roles_url, .header_lines = headers};
    STOKER_ASSIGN_OR_RETURN(std::string role_list, Fetch200(*client, roles));
    const std::string role = TrimmedLine(role_list.substr(0, role_list.find('\n')));
    if (role.empty()) {
      return Err(Status::NotFound(
          fmt::format("{}: the instance has no IAM role (instance profile)", roles.where)));
    }
    http::Request credentials{
        .url = roles_url + role, .where = "GET " + roles_url + role, .header_lines = headers};
    STOKER_ASSIGN_OR_RETURN(std::string body, Fetch200(*client, credentials));
    return ParseCredentialJson(body, credentials.where);
  };
}

CredentialProvider::Fetch WebIdentityCredentials(WebIdentity identity,
                                                 std::chrono::milliseconds timeout) {
  auto client = http::Client::Create(timeout);
  return [identity = std::move(identity), client]() -> Result<TimedCredentials> {
    const std::string token = TrimmedLine(ReadWholeFile(identity.token_file));
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
    request.where = fmt::format("AssumeRoleWithWebIdentity at {} (role {})", identity.sts_endpoint,
                                identity.role_arn);
    request.header_lines = {"Content-Type: application/x-www-form-urlencoded",
                            "Accept: application/xml"};
    request.body = std::as_bytes(std::span(form));
    STOKER_ASSIGN_OR_RETURN(std::string body, Fetch200(*client, request));
    return ParseStsCredentials(body, request.where);
  };
}

}  // namespace stoker::s3
