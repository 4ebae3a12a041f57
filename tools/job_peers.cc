#include "tools/job_peers.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <vector>

#include <fmt/format.h>

#include "node/rendezvous.h"
#include "node/slurm_peers.h"

namespace stoker::cli {
namespace {

Result<std::vector<net::ServerAddress>> ParsePeers(const std::string& list) {
  std::vector<net::ServerAddress> peers;
  size_t start = 0;
  while (start < list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    if (comma > start) {
      auto peer = net::ParseServerAddress(list.substr(start, comma - start));
      if (!peer) return Err(peer.error().WithContext("--peers"));
      peers.push_back(std::move(*peer));
    }
    start = comma + 1;
  }
  return peers;
}

}  // namespace

Result<net::ServerAddress> ReachableAs(net::ServerAddress bound) {
  if (!bound.host.empty() && bound.host != "0.0.0.0" && bound.host != "::") return bound;
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) {
    return Err(Status::FromErrno(errno, "gethostname (give the address with --advertise)"));
  }
  bound.host = name;
  return bound;
}

void AddJobPeersOptions(CLI::App* cmd, JobPeersArgs& args, const std::string& listen_flag) {
  cmd->add_option("--peers", args.peers,
                  "every cache daemon of the job, this one included: HOST:PORT,HOST:PORT,...; or "
                  "'slurm': every node of the Slurm job (SLURM_JOB_NODELIST) at the " +
                      listen_flag + " port, this one by SLURMD_NODENAME");
  cmd->add_option("--rendezvous", args.rendezvous,
                  "instead of --peers: a file every node can reach (a shared directory) where the "
                  "daemons register and find each other");
  cmd->add_option("--expect", args.expect, "with --rendezvous: how many cache daemons the job has");
  cmd->add_option("--rendezvous-timeout", args.rendezvous_timeout,
                  "seconds to wait for the other daemons to register")
      ->capture_default_str();
}

Status ResolveJobPeers(const JobPeersArgs& a, node::NodeOptions& o,
                       const std::function<void(const std::string&)>& log) {
  if (a.peers == "slurm") {
    const char* node_list = std::getenv("SLURM_JOB_NODELIST");
    const char* node_name = std::getenv("SLURMD_NODENAME");
    auto slurm =
        node::PeersFromSlurm(node_list ? node_list : "", node_name ? node_name : "", o.listen.port);
    if (!slurm) return slurm.error();
    o.peers = std::move(slurm->peers);
    if (o.advertise.host.empty()) o.advertise = slurm->self;
  } else {
    auto peers = ParsePeers(a.peers);
    if (!peers) return peers.error();
    o.peers = std::move(*peers);
  }
  if (o.advertise.host.empty()) {
    auto reachable = ReachableAs(o.listen);
    if (!reachable) return reachable.error();
    o.advertise = std::move(*reachable);
  }
  if (a.rendezvous.empty()) return Status::OK();
  if (!o.peers.empty() || a.expect == 0) {
    return Status::InvalidArgument(
        "--rendezvous FILE needs --expect N (the job's daemon count) and no --peers");
  }
  const net::ServerAddress self = o.advertise.host.empty() ? o.listen : o.advertise;
  if (self.port == 0) return Status::InvalidArgument("--rendezvous needs a fixed port");
  log(fmt::format("waiting for {} daemon(s) in {}", a.expect, a.rendezvous));
  auto found = node::Rendezvous(
      a.rendezvous, self, a.expect,
      std::chrono::milliseconds(static_cast<int64_t>(a.rendezvous_timeout * 1000)));
  if (!found) return found.error();
  o.peers = std::move(*found);
  return Status::OK();
}

}  // namespace stoker::cli
