// A node daemon's peers in a Slurm job (`stoker node --peers slurm`, docs/slurm.md): every node
// of the job, from SLURM_JOB_NODELIST, at the daemons' one port, and this node by its Slurm
// name (SLURMD_NODENAME). Slurm writes node lists compressed ("gpu[01-04,07],login2"), so the
// list is expanded here as `scontrol show hostnames` would.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "net/uri.h"
#include "stoker/status.h"

namespace stoker::node {

// The names of a Slurm hostlist, in order, each once: comma-separated names, each with any
// number of bracketed ranges ("n[1-3,7]", "r[1-2]n[01-02]"; a range keeps the zero padding of
// its bounds). InvalidArgument, quoting the list, for a malformed one or one over 65,536 names.
Result<std::vector<std::string>> ExpandHostlist(std::string_view list);

struct SlurmPeers {
  std::vector<net::ServerAddress> peers;  // every node of the job, this one included
  net::ServerAddress self;
};

// From the values of SLURM_JOB_NODELIST and SLURMD_NODENAME (`node_list` or `node_name` empty:
// not set), with `port` for every daemon. InvalidArgument saying what is missing (outside a
// Slurm job, or in `sbatch` without `srun`) or wrong (this node not in the list).
Result<SlurmPeers> PeersFromSlurm(std::string_view node_list, std::string_view node_name,
                                  uint16_t port);

}  // namespace stoker::node
