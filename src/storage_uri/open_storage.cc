// OpenStorage: a dataset location to its storage backend, by the URI's scheme. Local paths and
// file:// URIs are PosixStorage (src/storage/), stoker:// a `stoker serve` server (src/net/),
// s3:// a bucket prefix (src/s3/), http(s):// a read-only dataset on a web server (src/http/); with
// a node daemon's socket (StorageOptions::node_socket or $STOKER_NODE) the daemon is put in front
// of any of them (src/node_client/).
//
// Dispatch is its own folder and library (stoker_storage_uri) because it must see every backend
// while the backends build on stoker_storage: here, one layer up, it closes no cycle. The table
// is explicit rather than a registry filled by static constructors, which a static link can
// silently drop.
#include <cstdlib>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "common/parse_number.h"
#include "http/http_storage.h"
#include "net/remote_storage.h"
#include "net/uri.h"
#include "node_client/node_storage.h"
#include "node_client/trainer_protocol.h"
#include "s3/s3_config.h"
#include "s3/s3_storage.h"
#include "stoker/storage.h"
#include "storage/posix_storage.h"

namespace stoker {
namespace {

// The backend itself, never behind a node daemon.
// A file:// URI's path is percent-encoded (RFC 8089; Python's Path.as_uri() writes a space as
// %20): each %XY of two hex digits is that byte; a '%' not followed by two is itself.
Result<std::string> PercentDecoded(std::string_view path, std::string_view uri) {
  std::string out;
  out.reserve(path.size());
  for (size_t i = 0; i < path.size(); ++i) {
    const auto byte = path[i] == '%' && i + 2 < path.size()
                          ? ParseUnsigned<uint8_t>(path.substr(i + 1, 2), 16)
                          : std::nullopt;
    if (byte) {
      if (*byte == 0) {
        return Err(Status::InvalidArgument(fmt::format("{}: %00 in a path", uri)));
      }
      out.push_back(static_cast<char>(*byte));
      i += 2;
    } else {
      out.push_back(path[i]);
    }
  }
  return out;
}

Result<std::shared_ptr<Storage>> OpenBackend(std::string_view uri, const StorageOptions& options) {
  if (uri.starts_with(net::kStokerScheme)) return net::OpenRemoteStorage(uri, options);
  if (uri.starts_with(s3::kS3Scheme)) return s3::OpenS3Storage(uri, options);
  if (uri.starts_with(http::kHttpScheme) || uri.starts_with(http::kHttpsScheme)) {
    return http::OpenHttpStorage(uri, options);
  }
  constexpr std::string_view kFileScheme = "file://";
  if (uri.starts_with(kFileScheme)) {
    // RFC 8089: file:///path or file://localhost/path. A host is another machine's path (or a
    // relative path written as a URI), which would otherwise open a local relative path.
    const std::string_view original = uri;
    uri.remove_prefix(kFileScheme.size());
    if (uri.starts_with("localhost/")) uri.remove_prefix(std::string_view("localhost").size());
    if (!uri.starts_with('/')) {
      return Err(Status::InvalidArgument(
          fmt::format("{}: a file:// URI names a path on this machine (file:///absolute/path or "
                      "file://localhost/absolute/path); for a relative path, give the path alone",
                      original)));
    }
    STOKER_ASSIGN_OR_RETURN(const std::string path, PercentDecoded(uri, original));
    return storage::NewPosixStorage(path);
  }
  const auto scheme_end = uri.find("://");
  if (scheme_end != std::string_view::npos) {
    return Err(Status::Unsupported(
        "unsupported URI scheme '" + std::string(uri.substr(0, scheme_end)) +
        "://' (this build reads local paths, file://, stoker://, s3:// and http(s):// URIs)"));
  }
  if (uri.empty()) return Err(Status::InvalidArgument("empty dataset path"));
  return storage::NewPosixStorage(std::string(uri));
}

}  // namespace

Result<std::shared_ptr<Storage>> OpenStorage(std::string_view uri, const StorageOptions& options) {
  STOKER_ASSIGN_OR_RETURN(auto store, OpenBackend(uri, options));
  std::string node_socket;
  if (options.node_socket) {
    node_socket = *options.node_socket;
  } else if (const char* from_env = std::getenv(node::kNodeSocketEnv); from_env != nullptr) {
    node_socket = from_env;
  }
  if (node_socket.empty()) return store;
  return node::NewNodeStorage(std::move(store), std::move(node_socket));
}

}  // namespace stoker
