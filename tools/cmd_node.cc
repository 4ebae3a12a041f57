// `stoker node`: run one job's cache daemon on this machine until SIGINT/SIGTERM (docs/cache.md).
#include <cstdio>

#include <fmt/format.h>

#include "common/log.h"
#include "common/progress.h"
#include "common/stop_signals.h"
#include "net/auth.h"
#include "node/node.h"
#include "tools/commands.h"
#include "tools/job_peers.h"
#include "tools/option_flags.h"
#include "tools/output.h"

namespace stoker::cli {
namespace {

struct NodeArgs {
  std::string job;
  std::string store;
  std::string listen = "127.0.0.1:7171";
  std::string advertise;
  JobPeersArgs job_peers;
  std::string socket;
  uint64_t memory_limit = uint64_t{4} << 30;
  std::string disk_dir;
  uint64_t disk_limit = 0;
  std::string secret_file;
  int metrics_port = -1;
  size_t prefetch = 8;
  size_t prefetch_streams = 4;
};

void LogLine(const std::string& line) { log::Info("node", line); }

int RunNode(const NodeArgs& a) {
  log::SetTimestamps(true);  // a daemon's log: when each event happened
  node::NodeOptions o;
  o.job = a.job;
  o.store_uri = a.store;
  // A --listen or --advertise that does not parse is a bad command line (exit 2).
  auto listen = net::ParseServerAddress(a.listen);
  if (!listen) return FailUsage("node", listen.error().WithContext("--listen"));
  o.listen = *listen;
  if (!a.advertise.empty()) {
    auto advertise = net::ParseServerAddress(a.advertise);
    if (!advertise) return FailUsage("node", advertise.error().WithContext("--advertise"));
    o.advertise = *advertise;
  }
  const Status joined = ResolveJobPeers(a.job_peers, o, LogLine);
  if (!joined.ok()) return Fail("node", joined);
  o.socket_path = a.socket.empty() ? "/run/stoker/" + a.job + ".sock" : a.socket;
  o.memory_limit = a.memory_limit;
  o.disk_dir = a.disk_dir;
  o.disk_limit = a.disk_limit;
  if (!o.disk_dir.empty() && o.disk_limit == 0) {
    return FailUsage("node", Status::InvalidArgument("--disk-dir needs --disk-limit (e.g. 500G)"));
  }
  auto secret = net::LoadSecret(a.secret_file);
  if (!secret) return Fail("node", secret.error());
  o.secret = std::move(*secret);
  o.metrics_port = a.metrics_port;
  o.prefetch_depth = a.prefetch;
  o.prefetch_streams = a.prefetch_streams;
  o.log = LogLine;

  DaemonSignals signals;  // before any thread starts: every thread inherits the mask

  auto daemon = node::Node::Start(std::move(o));
  if (!daemon) return Fail("node", daemon.error());
  const node::NodeStats s = (*daemon)->stats();
  std::string line = fmt::format("job {}: {} peer(s), cache {}, peers on port {}, trainers on {}",
                                 a.job, s.peers_total, HumanBytes(s.cache_capacity),
                                 (*daemon)->port(), (*daemon)->socket_path());
  if ((*daemon)->metrics_port() >= 0) {
    line += fmt::format(", metrics on port {}", (*daemon)->metrics_port());
  }
  LogLine(line);
  signals.Wait();
  // What the job got from this daemon, for its log (and the Slurm recipe's check).
  const node::NodeStats end = (*daemon)->stats();
  (*daemon)->Shutdown();
  LogLine(
      fmt::format("stopped: {} chunk(s) handed to trainers, {} read from the store, {} from "
                  "peers, {} served to peers",
                  end.trainer_gets, end.store_fills, end.peer_fills, end.peer_requests));
  return kExitOk;
}

}  // namespace

void RegisterNode(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<NodeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "node",
      "Run this machine's cache daemon for one training job (set STOKER_NODE=SOCKET "
      "in the trainers' environment to use it)");
  cmd->add_option("--job", args->job,
                  "job id: namespaces the cache (every daemon of the job "
                  "uses the same one)")
      ->required();
  cmd->add_option("--store", args->store,
                  "the dataset: a path, file://, stoker://, s3:// or http(s):// URI")
      ->required();
  cmd->add_option("--listen", args->listen, "HOST:PORT for the other daemons (port 0: any)")
      ->capture_default_str();
  cmd->add_option("--advertise", args->advertise,
                  "HOST:PORT the other daemons know this one by (default: --listen)");
  AddJobPeersOptions(cmd, args->job_peers, "--listen");
  cmd->add_option("--socket", args->socket,
                  "unix socket for the trainers (default /run/stoker/JOB.sock)");
  cmd->add_option("--memory-limit", args->memory_limit, "hard cap on cached chunk bytes (e.g. 8G)")
      ->transform(ByteSize())
      ->capture_default_str();
  cmd->add_option("--disk-dir", args->disk_dir,
                  "local directory for a disk tier below the memory cache (chunks are kept in "
                  "DIR/JOB and survive a daemon restart)");
  cmd->add_option("--disk-limit", args->disk_limit, "bytes the disk tier may hold (e.g. 500G)")
      ->transform(ByteSize())
      ->needs("--disk-dir");
  cmd->add_option("--secret-file", args->secret_file,
                  "file holding the shared secret (default: $STOKER_SECRET_FILE or "
                  "$STOKER_SECRET)");
  AddMetricsPortFlag(*cmd, args->metrics_port);
  cmd->add_option("--prefetch", args->prefetch,
                  "chunks to fetch ahead of each trainer's plan (0: none)")
      ->capture_default_str();
  cmd->add_option("--prefetch-streams", args->prefetch_streams, "chunks prefetched at once (1-64)")
      ->capture_default_str();
  cmd->callback([args, &exit_code] { exit_code = RunNode(*args); });
}

}  // namespace stoker::cli
