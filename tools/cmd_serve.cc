// `stoker serve`: export datasets over the stoker wire protocol until SIGINT/SIGTERM.
#include <cstdio>

#include <fmt/format.h>

#include "common/stop_signals.h"
#include "format/versions.h"
#include "net/auth.h"
#include "net/uri.h"
#include "server/server.h"
#include "stoker/storage.h"
#include "tools/commands.h"
#include "tools/option_flags.h"
#include "tools/output.h"

namespace stoker::cli {
namespace {

struct ServeArgs {
  std::string listen = "127.0.0.1:7070";
  std::vector<std::string> datasets;
  std::string root;
  std::string secret_file;
  int metrics_port = -1;
  size_t max_connections = 1024;
  uint64_t memory_limit = uint64_t{1} << 30;
  bool writable = false;
};

int RunServe(const ServeArgs& a) {
  // A --listen or --dataset that does not parse is a bad command line (exit 2), as any flag's.
  server::ServerOptions o;
  auto listen = net::ParseServerAddress(a.listen);
  if (!listen) return FailUsage("serve", listen.error().WithContext("--listen"));
  o.host = listen->host;
  o.port = listen->port;
  for (const std::string& spec : a.datasets) {
    // NAME=URI (s3://, stoker://): served through its storage; NAME=PATH: a local directory.
    const size_t eq = spec.find('=');
    if (eq != std::string::npos && spec.find("://", eq) != std::string::npos) {
      const std::string uri = spec.substr(eq + 1);
      auto storage = OpenStorage(uri);
      if (!storage) return Fail("serve", storage.error());
      auto versions = format::ListVersions(**storage);
      if (!versions) return Fail("serve", versions.error());
      if (versions->empty()) {
        return Fail("serve",
                    Status::InvalidArgument(uri + " is not a stoker dataset (no versions/)"));
      }
      o.storages.emplace(spec.substr(0, eq), std::move(*storage));
      continue;
    }
    if (Status st = server::AddDatasetSpec(spec, &o.datasets); !st.ok())
      return FailUsage("serve", st);
  }
  if (!a.root.empty()) {
    // The datasets there now are checked at start; later ones are found when asked for.
    if (Status st = server::AddDatasetRoot(a.root, &o.datasets); !st.ok()) return Fail("serve", st);
    o.root = a.root;
  }
  if (o.datasets.empty() && o.storages.empty() && o.root.empty()) {
    return Fail("serve", Status::InvalidArgument(
                             "nothing to serve: give --dataset NAME=PATH or --root DIR"));
  }
  auto secret = net::LoadSecretFile(a.secret_file);
  if (!secret) return Fail("serve", secret.error());
  o.secret = std::move(*secret);
  o.metrics_port = a.metrics_port;
  o.max_connections = a.max_connections;
  o.memory_limit = a.memory_limit;
  o.writable = a.writable;

  DaemonSignals signals;  // before any thread starts: every thread inherits the mask

  const size_t dataset_count = o.datasets.size() + o.storages.size();
  auto server = server::Server::Start(std::move(o));
  if (!server) return Fail("serve", server.error());
  std::string line =
      fmt::format("serving {} dataset(s){} on {}", dataset_count,
                  a.root.empty() ? "" : fmt::format(" (and any new under {})", a.root),
                  net::ServerAddress{listen->host, (*server)->port()}.ToString());
  if ((*server)->metrics_port() >= 0) {
    line += fmt::format(", metrics on port {}", (*server)->metrics_port());
  }
  std::fprintf(stderr, "%s\n", line.c_str());
  signals.Wait();
  (*server)->Shutdown();
  return kExitOk;
}

}  // namespace

void RegisterServe(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "Export datasets over the network (stoker:// URIs)");
  cmd->add_option("--listen", args->listen, "HOST:PORT to listen on (port 0: any free port)")
      ->capture_default_str();
  cmd->add_option("--dataset", args->datasets,
                  "NAME=PATH or NAME=URI (s3://…) of a dataset to export (repeatable)");
  cmd->add_option(
      "--root", args->root,
      "export every subdirectory of DIR holding a dataset, named by the directory (also those made "
      "later; with --writable, a first pack to stoker://HOST/NAME creates DIR/NAME)");
  cmd->add_option("--secret-file", args->secret_file,
                  "file holding the shared secret (at least 16 bytes)")
      ->required();
  AddMetricsPortFlag(*cmd, args->metrics_port);
  cmd->add_option("--max-connections", args->max_connections, "connections served at once")
      ->check(WholeNumber(true))
      ->capture_default_str();
  cmd->add_flag("--writable", args->writable,
                "accept writes into the --dataset/--root directories (pack, --append, commit, "
                "compact, gc over stoker://); a --dataset directory may then be empty");
  cmd->add_option("--memory-limit", args->memory_limit,
                  "answer buffers over all connections (e.g. 1GiB)")
      ->transform(ByteSize())
      ->capture_default_str();
  cmd->callback([args, &exit_code] { exit_code = RunServe(*args); });
}

}  // namespace stoker::cli
