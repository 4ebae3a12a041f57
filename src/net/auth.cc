#include "net/auth.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <array>
#include <cstdlib>

#include "net/payload.h"

namespace stoker::net {
namespace {

using Proof = std::array<unsigned char, kProofSize>;
using Nonce = std::array<unsigned char, kNonceSize>;

// The labels bind a proof to its direction, so a server's proof cannot be replayed as a
// client's (the nonces are also swapped between the two).
constexpr std::string_view kServerLabel = "stoker/1 server";
constexpr std::string_view kClientLabel = "stoker/1 client";

std::string_view View(const Nonce& n) {
  return {reinterpret_cast<const char*>(n.data()), n.size()};
}

Proof ComputeProof(std::string_view secret, std::string_view label, std::string_view first,
                   std::string_view second) {
  std::string message;
  message.reserve(label.size() + first.size() + second.size());
  message.append(label).append(first).append(second);
  Proof out{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), out.data(), &len);
  return out;
}

bool ProofMatches(const Proof& expected, std::string_view got) {
  return got.size() == expected.size() &&
         CRYPTO_memcmp(expected.data(), got.data(), expected.size()) == 0;
}

Result<Nonce> RandomNonce() {
  Nonce n{};
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1) {
    return Err(Status::Internal("RAND_bytes failed: no randomness for the handshake nonce"));
  }
  return n;
}

}  // namespace

Status CheckSecret(std::string_view secret, std::string_view where) {
  if (secret.size() < kMinSecretBytes) {
    return Status::InvalidArgument("the secret from " + std::string(where) + " has " +
                                   std::to_string(secret.size()) + " bytes; at least " +
                                   std::to_string(kMinSecretBytes) + " are required");
  }
  return Status::OK();
}

Result<std::string> LoadSecretFile(const std::string& path) {
  // Checked on the open file (no swap in between): a regular file of at most 64 KiB (a secret
  // is tens of bytes; /dev/zero or a FIFO must not fill memory or hang), and, as ssh does with
  // private keys, readable by its owner alone: a secret others can read is no secret.
  constexpr size_t kMaxSecretFileBytes = 64 << 10;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return Err(Status::FromErrno(errno, "cannot read secret file " + path));
  struct stat st;
  Status refused;
  if (::fstat(fd, &st) != 0) {
    refused = Status::FromErrno(errno, "cannot read secret file " + path);
  } else if (!S_ISREG(st.st_mode)) {
    refused = Status::InvalidArgument(fmt::format("secret file {} is not a regular file", path));
  } else if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    refused = Status::InvalidArgument(
        fmt::format("secret file {} is accessible by group or others (mode {:04o}): `chmod 600 {}` "
                    "(a Kubernetes Secret volume: defaultMode: 0400, and no fsGroup)",
                    path, st.st_mode & 07777, path));
  }
  std::string secret;
  if (refused.ok()) {
    char buf[4096];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) != 0;) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        refused = Status::FromErrno(errno, "cannot read secret file " + path);
        break;
      }
      secret.append(buf, static_cast<size_t>(n));
      if (secret.size() > kMaxSecretFileBytes) {
        refused = Status::InvalidArgument(fmt::format(
            "secret file {} is over {} bytes: not a secret", path, kMaxSecretFileBytes));
        break;
      }
    }
  }
  ::close(fd);
  if (!refused.ok()) return Err(refused);
  if (!secret.empty() && secret.back() == '\n') secret.pop_back();
  if (!secret.empty() && secret.back() == '\r') secret.pop_back();
  STOKER_RETURN_IF_ERROR(CheckSecret(secret, "secret file " + path));
  return secret;
}

Result<std::string> LoadSecret(const std::string& secret_file) {
  return secret_file.empty() ? LoadSecretFromEnvironment() : LoadSecretFile(secret_file);
}

Result<std::string> LoadSecretFromEnvironment() {
  if (const char* file = std::getenv("STOKER_SECRET_FILE"); file != nullptr && *file != '\0') {
    return LoadSecretFile(file);
  }
  if (const char* secret = std::getenv("STOKER_SECRET"); secret != nullptr && *secret != '\0') {
    STOKER_RETURN_IF_ERROR(CheckSecret(secret, "$STOKER_SECRET"));
    return std::string(secret);
  }
  return Err(Status::InvalidArgument(
      "stoker:// needs the server's shared secret: set STOKER_SECRET_FILE (a file holding it) "
      "or STOKER_SECRET"));
}

Status ClientHandshake(Socket& socket, std::string_view secret, Deadline deadline) {
  const std::string& peer = socket.peer();
  STOKER_ASSIGN_OR_RETURN(const Nonce client_nonce, RandomNonce());
  PayloadWriter hello;
  hello.U16(kProtocolVersion).Raw(View(client_nonce));
  STOKER_RETURN_IF_ERROR(WriteFrame(socket, MessageType::kHello, 0, hello.data(), deadline));

  STOKER_ASSIGN_OR_RETURN(Frame challenge, ReadFrame(socket, kMaxHandshakeFrame, deadline));
  if (challenge.message_type() == MessageType::kError) {
    return DecodeErrorPayload(challenge.payload, peer)
        .WithContext(peer + " refused the connection");
  }
  PayloadReader r(challenge.payload);
  auto version = r.U16();
  auto server_nonce = r.Raw(kNonceSize);
  auto server_proof = r.Raw(kProofSize);
  if (challenge.message_type() != MessageType::kChallenge || !server_proof || !r.ExpectEnd().ok()) {
    return Status::Corruption("malformed handshake from " + peer + " (not a stoker server?)");
  }
  if (*version != kProtocolVersion) {
    return Status::Unsupported(peer + " speaks protocol version " + std::to_string(*version) +
                               ", this client speaks " + std::to_string(kProtocolVersion));
  }
  const Proof expected = ComputeProof(secret, kServerLabel, View(client_nonce), *server_nonce);
  if (!ProofMatches(expected, *server_proof)) {
    return Status::PermissionDenied(
        "the handshake proof of " + peer +
        " does not match our secret: the client's and "
        "the server's secrets differ (or this is not the server you meant); nothing was "
        "sent to it");
  }
  const Proof proof = ComputeProof(secret, kClientLabel, *server_nonce, View(client_nonce));
  STOKER_RETURN_IF_ERROR(WriteFrame(socket, MessageType::kAuth, 0,
                                    {reinterpret_cast<const char*>(proof.data()), proof.size()},
                                    deadline));
  STOKER_ASSIGN_OR_RETURN(Frame welcome, ReadFrame(socket, kMaxHandshakeFrame, deadline));
  if (welcome.message_type() == MessageType::kError) {
    return DecodeErrorPayload(welcome.payload, peer).WithContext(peer);
  }
  if (welcome.message_type() != MessageType::kWelcome || !welcome.payload.empty()) {
    return Status::Corruption("malformed handshake from " + peer + ": expected WELCOME");
  }
  return Status::OK();
}

Status ServerHandshake(Socket& socket, std::string_view secret, Deadline deadline,
                       bool* auth_failed) {
  *auth_failed = false;
  STOKER_ASSIGN_OR_RETURN(Frame hello, ReadFrame(socket, kMaxHandshakeFrame, deadline));
  PayloadReader r(hello.payload);
  auto version = r.U16();
  auto client_nonce = r.Raw(kNonceSize);
  if (hello.message_type() != MessageType::kHello || !client_nonce || !r.ExpectEnd().ok()) {
    return Status::InvalidArgument("expected HELLO from " + socket.peer());
  }
  if (*version != kProtocolVersion) {
    const Status st = Status::Unsupported("protocol version " + std::to_string(*version) +
                                          " is not supported (this server speaks " +
                                          std::to_string(kProtocolVersion) + ")");
    (void)WriteFrame(socket, MessageType::kError, 0, EncodeErrorPayload(st), deadline);
    return st;
  }
  STOKER_ASSIGN_OR_RETURN(const Nonce server_nonce, RandomNonce());
  const Proof server_proof = ComputeProof(secret, kServerLabel, *client_nonce, View(server_nonce));
  PayloadWriter challenge;
  challenge.U16(kProtocolVersion)
      .Raw(View(server_nonce))
      .Raw({reinterpret_cast<const char*>(server_proof.data()), server_proof.size()});
  STOKER_RETURN_IF_ERROR(
      WriteFrame(socket, MessageType::kChallenge, 0, challenge.data(), deadline));

  Result<Frame> answer = ReadFrame(socket, kMaxHandshakeFrame, deadline);
  if (!answer) {
    // A client checks this server's proof before it answers and, finding it wrong, hangs up
    // without a word: its secret differs. Counted as a wrong secret (what else closes in the
    // microseconds between the two frames?), or dashboards would never see such clients. A
    // client that stops answering is not.
    *auth_failed = !answer.error().IsTimeout();
    return answer.error().WithContext(*auth_failed
                                          ? "the client hung up after the challenge (a client "
                                            "whose secret differs does)"
                                          : "waiting for AUTH");
  }
  const Frame& auth = *answer;
  if (auth.message_type() != MessageType::kAuth) {
    return Status::InvalidArgument("expected AUTH from " + socket.peer());
  }
  const Proof expected = ComputeProof(secret, kClientLabel, View(server_nonce), *client_nonce);
  if (!ProofMatches(expected, auth.payload)) {
    *auth_failed = true;
    const Status st(StatusCode::kPermissionDenied,
                    "authentication failed: the client's proof does not match this server's "
                    "secret");
    (void)WriteFrame(socket, MessageType::kError, 0, EncodeErrorPayload(st), deadline);
    return st.WithContext(socket.peer());
  }
  return WriteFrame(socket, MessageType::kWelcome, 0, {}, deadline);
}

}  // namespace stoker::net
