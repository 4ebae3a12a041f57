// A file of "host:port" lines on storage every machine of a job can reach (the job's shared
// directory on NFS, Lustre, CephFS …): how `stoker node --rendezvous` daemons find each other
// and how `stoker feed --announce` tells trainers where it is. Each process appends its own
// line with one O_APPEND write of a few bytes, which POSIX file systems keep whole.
// Thread-safe (no shared state).
#pragma once

#include <string>

#include "net/uri.h"
#include "stoker/status.h"

namespace stoker::net {

// Appends "host:port\n"; an error naming the file if it cannot.
Status AppendAddress(const std::string& path, const ServerAddress& address);

}  // namespace stoker::net
