// Maps a dataset URI to its storage backend. New schemes (s3://, stoker://) register here.
#include "stoker/storage.h"
#include "storage/posix_storage.h"

namespace stoker {

Result<std::shared_ptr<Storage>> OpenStorage(std::string_view uri) {
  constexpr std::string_view kFileScheme = "file://";
  if (uri.starts_with(kFileScheme)) uri.remove_prefix(kFileScheme.size());
  const auto scheme_end = uri.find("://");
  if (scheme_end != std::string_view::npos) {
    return Err(Status::Unsupported("unsupported URI scheme '" +
                                   std::string(uri.substr(0, scheme_end)) +
                                   "://' (this build reads local paths and file:// URIs)"));
  }
  if (uri.empty()) return Err(Status::InvalidArgument("empty dataset path"));
  return storage::NewPosixStorage(std::string(uri));
}

}  // namespace stoker
