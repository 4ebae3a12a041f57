// `stoker feed`: lend this machine's CPUs to a training job until SIGINT/SIGTERM: make slices of
// its batches for the trainers that ask (decision 0013; docs/protocol.md, "Feeders").
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <system_error>

#include <fmt/format.h>

#include "common/log.h"
#include "common/stop_signals.h"
#include "feed/feeder.h"
#include "net/address_file.h"
#include "net/auth.h"
#include "net/uri.h"
#include "node/node.h"
#include "tools/commands.h"
#include "tools/job_peers.h"
#include "tools/option_flags.h"
#include "tools/output.h"

namespace stoker::cli {
namespace {

struct FeedArgs {
  std::string listen = "0.0.0.0:7072";
  std::string job;
  std::string secret_file;
  std::string advertise;
  std::string announce;
  std::string node;
  // This feeder's own member of the job cache (instead of --node): the job's store, where the
  // other daemons reach this one, and how it finds them.
  std::string store;
  std::string cache_listen = "0.0.0.0:7171";
  uint64_t cache_memory_limit = uint64_t{4} << 30;
  JobPeersArgs job_peers;
  uint32_t threads = 0;
  uint64_t memory_limit = uint64_t{1} << 30;
  int metrics_port = -1;
  bool json = false;
};

// The address trainers reach this feeder at: --advertise, else the bound address, a wildcard
// host replaced by this machine's name.
Result<net::ServerAddress> Advertised(const FeedArgs& a, const net::ServerAddress& bound) {
  if (!a.advertise.empty()) {
    auto advertised = net::ParseServerAddress(a.advertise);
    if (!advertised) return Err(advertised.error().WithContext("--advertise"));
    return advertised;
  }
  return ReachableAs(bound);
}

void LogCache(const std::string& line) { log::Info("feed", "job cache: " + line); }

// The options of this feeder's member of the job cache: a `stoker node` daemon inside this
// process. Chunks then come from the store once per job, whoever reads them (decision 0013).
// A rendezvous waits here for the job's other daemons.
Result<node::NodeOptions> JobCacheOptions(const FeedArgs& a, const std::string& secret) {
  if (a.store.empty()) {
    return Err(Status::InvalidArgument(
        "--peers/--rendezvous join the job cache, which needs the job's dataset: --store URI"));
  }
  if (!a.node.empty()) {
    return Err(Status::InvalidArgument(
        "--node reads through this machine's `stoker node`; --peers/--rendezvous make this "
        "feeder its own cache daemon: give one or the other"));
  }
  node::NodeOptions o;
  o.job = a.job;
  o.store_uri = a.store;
  auto listen = net::ParseServerAddress(a.cache_listen);
  if (!listen) return Err(listen.error().WithContext("--cache-listen"));
  if (listen->port == 0) return Err(Status::InvalidArgument("--cache-listen needs a fixed port"));
  o.listen = *listen;
  // Its name among the job's daemons: --advertise's host; else --cache-listen's, a wildcard
  // named as `stoker node` names it (ResolveJobPeers).
  if (!a.advertise.empty()) {
    auto advertised = net::ParseServerAddress(a.advertise);
    if (!advertised) return Err(advertised.error().WithContext("--advertise"));
    o.advertise = {advertised->host, listen->port};
  }
  o.memory_limit = a.cache_memory_limit;
  o.secret = secret;
  o.log = LogCache;
  STOKER_RETURN_IF_ERROR(ResolveJobPeers(a.job_peers, o, LogCache));
  return o;
}

// A private directory for the cache's trainer socket, removed however the command ends.
struct SocketDir {
  std::filesystem::path path;
  ~SocketDir() {
    std::error_code ignored;
    if (!path.empty()) std::filesystem::remove_all(path, ignored);
  }
  Status Make() {
    std::string name = (std::filesystem::temp_directory_path() / "stoker-feed-XXXXXX").string();
    if (::mkdtemp(name.data()) == nullptr) return Status::FromErrno(errno, "mkdtemp " + name);
    path = name;
    return Status::OK();
  }
};

int RunFeed(const FeedArgs& a) {
  feed::FeederOptions o;
  auto listen = net::ParseServerAddress(a.listen);
  if (!listen) return Fail("feed", listen.error().WithContext("--listen"));
  o.host = listen->host;
  o.port = listen->port;
  auto secret = net::LoadSecret(a.secret_file);
  if (!secret) return Fail("feed", secret.error());
  o.secret = *secret;
  o.threads = a.threads;
  o.memory_limit = a.memory_limit;
  o.metrics_port = a.metrics_port;
  // Chunks read through this machine's job-cache daemon, as a trainer's are: each chunk comes
  // from the store once per job, not once per feeder.
  if (!a.node.empty()) o.node_socket = a.node;

  // The job cache's members are found before the signals are blocked: a rendezvous may wait
  // minutes, and Ctrl-C or SIGTERM must still stop it. One that times out (a member that never
  // came) leaves this feeder feeding from the store: the job loses the cache here, not the CPUs.
  std::optional<node::NodeOptions> cache_options;
  if (JoinsJobCache(a.job_peers)) {
    auto options = JobCacheOptions(a, *secret);
    if (options) {
      cache_options = std::move(*options);
    } else if (options.error().IsTimeout()) {
      log::Warning("feed", "job cache: " + options.error().ToString() +
                               "; feeding without it (chunks from the store)");
    } else {
      return Fail("feed", options.error());
    }
  } else if (!a.store.empty()) {
    return Fail("feed", Status::InvalidArgument(
                            "--store names the dataset of the job cache this feeder joins: give "
                            "--peers or --rendezvous too"));
  }

  DaemonSignals signals;  // before any thread starts: every thread inherits the mask

  SocketDir socket_dir;  // removed after the cache daemon (declared later, destroyed first)
  std::unique_ptr<node::Node> cache;
  if (cache_options) {
    const Status made = socket_dir.Make();
    if (!made.ok()) return Fail("feed", made);
    cache_options->socket_path = (socket_dir.path / "node.sock").string();
    auto started = node::Node::Start(*std::move(cache_options));
    if (!started) return Fail("feed", started.error());
    cache = std::move(*started);
    o.node_socket = cache->socket_path();
    node::Node* raw = cache.get();
    o.extra_metrics = [raw] { return node::RenderNodeMetrics(raw->stats()); };
    LogCache(
        fmt::format("{} daemon(s), {:.0f} MiB here, peers on port {}", raw->stats().peers_total,
                    static_cast<double>(raw->stats().cache_capacity) / (1 << 20), raw->port()));
  }

  auto feeder = feed::Feeder::Start(std::move(o));
  if (!feeder) return Fail("feed", feeder.error());
  const std::string address = net::ServerAddress{listen->host, (*feeder)->port()}.ToString();
  if (!a.announce.empty()) {
    auto advertised = Advertised(a, {listen->host, (*feeder)->port()});
    if (!advertised) return Fail("feed", advertised.error());
    const Status announced = net::AppendAddress(a.announce, *advertised);
    if (!announced.ok()) return Fail("feed", announced.WithContext("--announce"));
  }
  if (a.json) {
    // One line a supervisor (or a test) reads to learn the port; then the daemon runs.
    nlohmann::json ready = {{"job", a.job}, {"listening", address}};
    if ((*feeder)->metrics_port() >= 0) ready["metrics_port"] = (*feeder)->metrics_port();
    std::printf("%s\n", ready.dump().c_str());
    std::fflush(stdout);
  } else {
    std::string line = fmt::format("job {}: feeding on {}", a.job, address);
    if ((*feeder)->metrics_port() >= 0) {
      line += fmt::format(", metrics on port {}", (*feeder)->metrics_port());
    }
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  signals.Wait();
  (*feeder)->Shutdown();
  const feed::FeederCounters& c = (*feeder)->counters();
  nlohmann::json counters = {{"slices", c.slices.load()},
                             {"samples", c.samples.load()},
                             {"failed_samples", c.failed_samples.load()},
                             {"refused", c.refused.load()}};
  std::string end =
      fmt::format("stopped: {} slice(s), {} sample(s) made ({} could not be), {} refused",
                  c.slices.load(), c.samples.load(), c.failed_samples.load(), c.refused.load());
  if (cache) {
    const node::NodeStats n = cache->stats();
    cache->Shutdown();
    counters["cache"] = {{"chunks_read", n.trainer_gets},
                         {"store_fills", n.store_fills},
                         {"peer_fills", n.peer_fills},
                         {"served_to_peers", n.peer_requests}};
    end += fmt::format(
        "; job cache: {} chunk(s) read, {} from the store, {} from peers, {} served "
        "to peers",
        n.trainer_gets, n.store_fills, n.peer_fills, n.peer_requests);
  }
  if (a.json) {
    std::printf("%s\n", counters.dump().c_str());
  } else {
    std::fprintf(stderr, "%s\n", end.c_str());
  }
  return kExitOk;
}

}  // namespace

void RegisterFeed(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<FeedArgs>();
  CLI::App* cmd = app.add_subcommand(
      "feed", "Lend this machine's CPUs to a training job: make slices of its image batches");
  cmd->add_option("--listen", args->listen, "HOST:PORT trainers connect to (port 0: any free port)")
      ->capture_default_str();
  cmd->add_option(
         "--job", args->job,
         "the training job this feeder serves (its logs; with --peers/--rendezvous, the job "
         "cache's name, as `stoker node --job`)")
      ->required();
  cmd->add_option("--secret-file", args->secret_file,
                  "file holding the job's shared secret (default: $STOKER_SECRET_FILE or "
                  "$STOKER_SECRET); trainers of other jobs fail the handshake");
  cmd->add_option("--announce", args->announce,
                  "append this feeder's HOST:PORT to FILE when ready (a file on storage the "
                  "trainers reach: ImageLoader(feeders=FILE) reads it every pass)");
  cmd->add_option("--advertise", args->advertise,
                  "HOST:PORT trainers know this feeder by, for --announce (default: the bound "
                  "address, a wildcard host replaced by this machine's name)");
  cmd->add_option("--node", args->node,
                  "read chunks through the job cache: the unix socket of this machine's `stoker "
                  "node` daemon of the job (default: $STOKER_NODE, else from the store)");
  cmd->add_option("--store", args->store,
                  "with --peers/--rendezvous: the job's dataset (as `stoker node --store`), cached "
                  "by this feeder's own member of the job cache");
  AddJobPeersOptions(cmd, args->job_peers, "--cache-listen");
  cmd->add_option("--cache-listen", args->cache_listen,
                  "with --peers/--rendezvous: HOST:PORT the job's other cache daemons reach this "
                  "feeder's at (named by --advertise's host when given)")
      ->capture_default_str();
  cmd->add_option("--cache-memory-limit", args->cache_memory_limit,
                  "with --peers/--rendezvous: hard cap on the chunk bytes this feeder caches for "
                  "the job (e.g. 8G)")
      ->transform(ByteSize())
      ->capture_default_str();
  // The decoders' own limit (ImagePipeline), checked here so a feeder never starts and then
  // refuses every slice.
  cmd->add_option("--threads", args->threads,
                  "decode threads per slice (0: the CPUs this process may use; at most 1024)")
      ->check(CLI::Range(0u, 1024u))
      ->capture_default_str();
  cmd->add_option("--memory-limit", args->memory_limit,
                  "images of the slices being made, together (e.g. 1GiB); a slice over it is "
                  "refused and its trainer makes it itself")
      ->transform(ByteSize())
      ->capture_default_str();
  AddMetricsPortFlag(*cmd, args->metrics_port);
  cmd->add_flag("--json", args->json,
                "print {\"job\", \"listening\"} as one JSON line when ready, and the counters at "
                "the end");
  cmd->callback([args, &exit_code] { exit_code = RunFeed(*args); });
}

}  // namespace stoker::cli
