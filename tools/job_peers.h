// How the cache daemons of one job find each other, for every command that joins a job's cache
// (`stoker node`, and `stoker feed`'s own daemon): --peers LIST, --peers slurm, or --rendezvous
// FILE --expect N. One set of flags, one meaning (docs/cache.md).
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "node/node.h"

namespace stoker::cli {

struct JobPeersArgs {
  std::string peers;
  std::string rendezvous;
  size_t expect = 0;
  double rendezvous_timeout = 300;
};

// The address others reach `bound` at: itself, a wildcard host ("0.0.0.0", "::") replaced by
// this machine's name (a daemon is never known as "0.0.0.0").
Result<net::ServerAddress> ReachableAs(net::ServerAddress bound);

// Adds --peers, --rendezvous, --expect and --rendezvous-timeout to `cmd`; `listen_flag` names
// the flag whose port `--peers slurm` uses.
void AddJobPeersOptions(CLI::App* cmd, JobPeersArgs& args, const std::string& listen_flag);

// True when the command line asked to join a cache of several daemons.
inline bool JoinsJobCache(const JobPeersArgs& a) {
  return !a.peers.empty() || !a.rendezvous.empty();
}

// Fills o.peers from the flags, and o.advertise when it is empty and o.listen is a wildcard
// (--peers slurm: SLURMD_NODENAME; else this machine's name); o.listen must be set. A rendezvous
// waits for the other daemons, logging that it does.
Status ResolveJobPeers(const JobPeersArgs& a, node::NodeOptions& o,
                       const std::function<void(const std::string&)>& log);

}  // namespace stoker::cli
