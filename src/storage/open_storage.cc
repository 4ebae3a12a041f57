// Maps a dataset URI to its storage backend: local paths and file:// URIs (PosixStorage),
// stoker:// URIs (a `stoker serve` server, src/net/remote_storage.h), s3:// URIs
// (src/s3/s3_storage.h); and, when $STOKER_NODE
// names a node daemon's socket, puts the daemon in front of it (src/node/node_storage.h).
//
// This file is its own library (stoker_storage_uri, see src/CMakeLists.txt) rather than part of
// stoker_storage: it must see every backend, and the network backend itself builds on
// stoker_storage. Keeping dispatch one layer up avoids a cycle without a registration hook that
// static linking could silently drop.
#include <cstdlib>

#include <fmt/format.h>

#include "net/remote_storage.h"
#include "net/uri.h"
#include "stoker/storage.h"
#include "node/node_storage.h"
#include "node/trainer_protocol.h"
#include "s3/s3_config.h"
#include "s3/s3_storage.h"
#include "storage/posix_storage.h"

namespace stoker {

Result<std::shared_ptr<Storage>> OpenStorage(std::string_view uri) {
  STOKER_ASSIGN_OR_RETURN(auto store, OpenStoreDirect(uri));
  const char* node_socket = std::getenv(node::kNodeSocketEnv);
  if (node_socket == nullptr || *node_socket == '\0') return store;
  return node::NewNodeStorage(std::move(store), node_socket);
}

Result<std::shared_ptr<Storage>> OpenStoreDirect(std::string_view uri) {
  if (uri.starts_with(net::kStokerScheme)) return net::OpenRemoteStorage(uri);
  if (uri.starts_with(s3::kS3Scheme)) return s3::OpenS3Storage(uri);
  constexpr std::string_view kFileScheme = "file://";
  if (uri.starts_with(kFileScheme)) {
    // RFC 8089: file:///path or file://localhost/path. A host is another machine's path (or a
    // relative path written as a URI), which would otherwise open a local relative path.
    const std::string_view original = uri;
    uri.remove_prefix(kFileScheme.size());
    if (uri.starts_with("localhost/")) uri.remove_prefix(std::string_view("localhost").size());
    if (!uri.starts_with('/')) {
      return Err(Status::InvalidArgument(fmt::format(
          "{}: a file:// URI names a path on this machine (file:///absolute/path or "
          "file://localhost/absolute/path); for a relative path, give the path alone",
          original)));
    }
  }
  const auto scheme_end = uri.find("://");
  if (scheme_end != std::string_view::npos) {
    return Err(Status::Unsupported("unsupported URI scheme '" +
                                   std::string(uri.substr(0, scheme_end)) +
                                   "://' (this build reads local paths, file://, stoker:// and s3:// URIs)"));
  }
  if (uri.empty()) return Err(Status::InvalidArgument("empty dataset path"));
  return storage::NewPosixStorage(std::string(uri));
}

}  // namespace stoker
