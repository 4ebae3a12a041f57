// Storage on a local (or mounted parallel/network) file system, rooted at a directory.
#pragma once

#include <memory>
#include <string>

#include "stoker/storage.h"

namespace stoker::storage {

std::shared_ptr<Storage> NewPosixStorage(std::string root);

// fsync(2) of a file (never through a symbolic link), or of a directory: makes its bytes, or
// the creations, renames and removals in it, durable.
Status FsyncFile(const std::string& path);
Status FsyncDirectory(const std::string& path);

}  // namespace stoker::storage
