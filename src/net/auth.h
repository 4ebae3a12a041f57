// The handshake every connection starts with (docs/protocol.md, "Authentication"): both sides
// prove with HMAC-SHA256 that they know the deployment secret, without sending it. Also loads
// the secret from a file or the environment. Stateless functions; thread-safe.
#pragma once

#include <chrono>
#include <string>

#include "net/socket.h"
#include "stoker/status.h"

namespace stoker::net {

// Reads a secret file: the whole file, minus one trailing LF and then one trailing CR (echo adds
// the LF, an editor on Windows the CR; docs/protocol.md, "The secret's bytes"). InvalidArgument
// naming the file if it is shorter than kMinSecretBytes.
Result<std::string> LoadSecretFile(const std::string& path);
// The client's secret: $STOKER_SECRET_FILE, else $STOKER_SECRET; InvalidArgument if neither is
// set (or the secret is too short).
Result<std::string> LoadSecretFromEnvironment();
// A daemon's secret (`stoker node`, `stoker feed`): `--secret-file` if given, else the
// environment's, as LoadSecretFromEnvironment reads it.
Result<std::string> LoadSecret(const std::string& secret_file);
Status CheckSecret(std::string_view secret, std::string_view where);

// Client side: HELLO, check CHALLENGE's proof, AUTH, wait for WELCOME. PermissionDenied if the
// server cannot prove it knows the secret (nothing is sent to it after that) or rejects ours;
// the server's ERROR (e.g. too many connections) is returned as is.
Status ClientHandshake(Socket& socket, std::string_view secret, Deadline deadline);

// Server side: reads at most two frames of at most kMaxHandshakeFrame bytes. On success the
// connection is authenticated; on failure an ERROR may have been sent and the caller closes.
// `auth_failed` is set when the peer spoke the protocol but had the wrong secret: its AUTH does
// not match, or it hung up after the CHALLENGE (a client that finds the server's proof wrong).
Status ServerHandshake(Socket& socket, std::string_view secret, Deadline deadline,
                       bool* auth_failed);

}  // namespace stoker::net
