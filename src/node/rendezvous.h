// Finding a job's daemons without listing them: a rendezvous file on storage every node of the
// job can reach (the job's shared directory on NFS, Lustre, CephFS …).
//
// Each daemon appends its "host:port" line (net/address_file.h) and waits until `expected`
// distinct addresses are in the file; the sorted set is the job's peer list, the same on every
// daemon. A restarted daemon appends its address again and finds the same set (its line is there
// already; duplicates count once).
//
// Thread-safe (no shared state).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "net/uri.h"
#include "stoker/status.h"

namespace stoker::node {

Result<std::vector<net::ServerAddress>> Rendezvous(const std::string& path,
                                                   const net::ServerAddress& self, size_t expected,
                                                   std::chrono::milliseconds timeout);

}  // namespace stoker::node
