// `stoker feed`: lend this machine's CPUs to a training job until SIGINT/SIGTERM: make slices of
// its batches for the trainers that ask (decision 0013; docs/protocol.md, "Feeders").
#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

#include "common/stop_signals.h"
#include "feed/feeder.h"
#include "net/address_file.h"
#include "net/auth.h"
#include "net/uri.h"
#include "tools/commands.h"
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
  uint32_t threads = 0;
  uint64_t memory_limit = uint64_t{1} << 30;
  int metrics_port = -1;
  bool json = false;
};

// The address trainers reach this feeder at: --advertise, else the bound address, a wildcard
// host replaced by this machine's name.
Result<net::ServerAddress> Advertised(const FeedArgs& a, net::ServerAddress bound) {
  if (!a.advertise.empty()) {
    auto advertised = net::ParseServerAddress(a.advertise);
    if (!advertised) return Err(advertised.error().WithContext("--advertise"));
    return advertised;
  }
  if (bound.host == "0.0.0.0" || bound.host == "::" || bound.host.empty()) {
    char name[256] = {};
    if (::gethostname(name, sizeof(name) - 1) != 0) {
      return Err(Status::FromErrno(errno, "gethostname (name this feeder with --advertise)"));
    }
    bound.host = name;
  }
  return bound;
}

int RunFeed(const FeedArgs& a) {
  feed::FeederOptions o;
  auto listen = net::ParseServerAddress(a.listen);
  if (!listen) return Fail("feed", listen.error().WithContext("--listen"));
  o.host = listen->host;
  o.port = listen->port;
  auto secret = net::LoadSecret(a.secret_file);
  if (!secret) return Fail("feed", secret.error());
  o.secret = std::move(*secret);
  o.threads = a.threads;
  o.memory_limit = a.memory_limit;
  o.metrics_port = a.metrics_port;
  // Chunks read through this machine's job-cache daemon, as a trainer's are: each chunk comes
  // from the store once per job, not once per feeder.
  if (!a.node.empty()) o.node_socket = a.node;

  DaemonSignals signals;  // before any thread starts: every thread inherits the mask

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
  const std::string end =
      fmt::format("stopped: {} slice(s), {} sample(s) made ({} could not be), {} refused",
                  c.slices.load(), c.samples.load(), c.failed_samples.load(), c.refused.load());
  if (a.json) {
    std::printf("%s\n", nlohmann::json({{"slices", c.slices.load()},
                                        {"samples", c.samples.load()},
                                        {"failed_samples", c.failed_samples.load()},
                                        {"refused", c.refused.load()}})
                            .dump()
                            .c_str());
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
  cmd->add_option("--job", args->job, "the training job this feeder serves (for its logs)")
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
  cmd->add_option("--threads", args->threads,
                  "decode threads per slice (0: the CPUs this process may use)")
      ->capture_default_str();
  cmd->add_option("--memory-limit", args->memory_limit,
                  "images of the slices being made, together (e.g. 1GiB); a slice over it is "
                  "refused and its trainer makes it itself")
      ->transform(ByteSize())
      ->capture_default_str();
  cmd->add_option("--metrics-port", args->metrics_port,
                  "serve Prometheus metrics on GET /metrics at this port (0: any free port)");
  cmd->add_flag("--json", args->json,
                "print {\"job\", \"listening\"} as one JSON line when ready, and the counters at "
                "the end");
  cmd->callback([args, &exit_code] { exit_code = RunFeed(*args); });
}

}  // namespace stoker::cli
