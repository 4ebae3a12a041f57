// Storage for stoker:// URIs: a dataset exported by `stoker serve`. OpenRead STATs the file and
// reads ranges over the wire; Map reads the whole file into memory (segment blocks and version
// records are small). Writes (a server started with --writable) upload a file in WRITE requests
// and FINISH it, replacing the target or creating it exclusively (CreateExclusive: the server's
// link(2), the compare-and-swap that versions are published with). Thread-safe, like every
// Storage.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "net/client.h"
#include "stoker/storage.h"

namespace stoker::net {

// What OpenStorage opens a stoker:// URI with: options.secret and options.request_timeout, each
// from the environment when unset (include/stoker/storage.h); InvalidArgument if no secret exists.
Result<std::shared_ptr<Storage>> OpenRemoteStorage(std::string_view uri,
                                                   const StorageOptions& options);
Result<std::shared_ptr<Storage>> OpenRemoteStorage(std::string_view uri, std::string secret,
                                                   const ClientOptions& options);
// Over an existing client (tests inspect its counters).
std::shared_ptr<Storage> NewRemoteStorage(std::shared_ptr<Client> client);

}  // namespace stoker::net
