#include "node/slurm_peers.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "common/parse_number.h"

namespace stoker::node {
namespace {

constexpr size_t kMaxHosts = 65536;

Status Malformed(std::string_view list, std::string_view why) {
  return Status::InvalidArgument(
      fmt::format("SLURM_JOB_NODELIST '{}' is not a Slurm hostlist: {}", list, why));
}

// The values one bracket stands for: "1-3,7" -> 1 2 3 7, "01-03" -> 01 02 03.
Result<std::vector<std::string>> ExpandRanges(std::string_view ranges, std::string_view list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= ranges.size()) {
    const size_t comma = std::min(ranges.find(',', start), ranges.size());
    const std::string_view range = ranges.substr(start, comma - start);
    const size_t dash = range.find('-');
    const std::string_view low = range.substr(0, dash);
    const std::string_view high = dash == std::string_view::npos ? low : range.substr(dash + 1);
    const auto from = ParseUnsigned<uint64_t>(low);
    const auto to = ParseUnsigned<uint64_t>(high);
    if (low.empty() || high.empty() || !from || !to || *to < *from) {
      return Err(Malformed(list, fmt::format("bad range '{}'", range)));
    }
    if (*to - *from >= kMaxHosts) return Err(Malformed(list, "over 65,536 names"));
    const size_t width = low.size();  // "01-10": two digits, "1-10": as many as needed
    for (uint64_t v = *from; v <= *to; ++v) out.push_back(fmt::format("{:0{}}", v, width));
    start = comma + 1;
  }
  return out;
}

}  // namespace

Result<std::vector<std::string>> ExpandHostlist(std::string_view list) {
  std::vector<std::string> hosts;
  std::set<std::string> seen;
  size_t pos = 0;
  while (pos < list.size()) {
    // One name: text and bracket groups up to a comma outside brackets.
    std::vector<std::string> names = {""};
    while (pos < list.size() && list[pos] != ',') {
      if (list[pos] == '[') {
        const size_t close = list.find(']', pos);
        if (close == std::string_view::npos) return Err(Malformed(list, "'[' without ']'"));
        STOKER_ASSIGN_OR_RETURN(auto values,
                                ExpandRanges(list.substr(pos + 1, close - pos - 1), list));
        if (names.size() * values.size() > kMaxHosts) {
          return Err(Malformed(list, "over 65,536 names"));
        }
        std::vector<std::string> product;
        product.reserve(names.size() * values.size());
        for (const std::string& name : names) {
          for (const std::string& v : values) product.push_back(name + v);
        }
        names = std::move(product);
        pos = close + 1;
      } else if (list[pos] == ']') {
        return Err(Malformed(list, "']' without '['"));
      } else {
        for (std::string& name : names) name.push_back(list[pos]);
        ++pos;
      }
    }
    ++pos;  // the comma
    for (std::string& name : names) {
      if (name.empty()) return Err(Malformed(list, "an empty name"));
      if (seen.insert(name).second) hosts.push_back(std::move(name));
      if (hosts.size() > kMaxHosts) return Err(Malformed(list, "over 65,536 names"));
    }
  }
  if (hosts.empty()) return Err(Malformed(list, "no names"));
  return hosts;
}

Result<SlurmPeers> PeersFromSlurm(std::string_view node_list, std::string_view node_name,
                                  uint16_t port) {
  if (node_list.empty()) {
    return Err(Status::InvalidArgument(
        "--peers slurm: SLURM_JOB_NODELIST is not set; run the daemons inside a Slurm job, one "
        "per node: srun --ntasks-per-node=1 stoker node ... (docs/slurm.md)"));
  }
  if (node_name.empty()) {
    return Err(Status::InvalidArgument(
        "--peers slurm: SLURMD_NODENAME is not set; start the daemons as a job step (srun "
        "--ntasks-per-node=1 stoker node ...), not from the batch script itself"));
  }
  if (port == 0) {
    return Err(Status::InvalidArgument(
        "--peers slurm needs a fixed --listen port, the same on every node"));
  }
  STOKER_ASSIGN_OR_RETURN(const auto hosts, ExpandHostlist(node_list));
  if (std::find(hosts.begin(), hosts.end(), node_name) == hosts.end()) {
    return Err(Status::InvalidArgument(fmt::format(
        "--peers slurm: this node ({}, SLURMD_NODENAME) is not in SLURM_JOB_NODELIST '{}'",
        node_name, node_list)));
  }
  SlurmPeers out;
  for (const std::string& host : hosts) out.peers.push_back({host, port});
  out.self = {std::string(node_name), port};
  return out;
}

}  // namespace stoker::node
